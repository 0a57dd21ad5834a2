"""The job page's HTML, CSS and script (``runtime.ops.ui`` serves it).

The first answer carries what the page shows: the plan's drawing inline and the state of the
latest sample as JSON, which the page draws before its first paint; later states come as
server-sent events (``/events``). A page answered before the plan is known fetches
``plan.svg`` once a state says it is ready.

The headline is how far behind the job is (over its input partitions, end offset less the next
offset to process, summed) and its rate; the lag since the checkpoint is a secondary figure,
labelled as such. Each input stream is one row: its totals, a sparkline of the last five
minutes and a heat strip of its partitions (one cell each, darker the further behind), so a
stream of 64 partitions takes one line.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["page_html"]


def _json_in_html(obj: Any) -> str:
    """JSON to put in a ``<script type="application/json">``: no ``<`` to end the element."""
    text = json.dumps(obj, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_html(job: str, state: Mapping[str, Any], svg: str | None, note: str | None) -> str:
    """The page for ``job``, with ``state`` (``JobView.state`` and the server's fields) to draw
    first and the plan's drawing ``svg`` (None: not known yet; ``note`` says why, if it is not
    to come)."""
    if svg is not None:
        dag = f'<div id="dag" data-drawn="1">{svg}</div>'
    else:
        dag = f'<div id="dag" class="mute">{html.escape(note or "waiting for the plan…")}</div>'
    parts = {"__JOB__": html.escape(job, quote=True), "__DAG__": dag,
             "__STATE__": _json_in_html(state)}
    return re.sub("__JOB__|__DAG__|__STATE__", lambda m: parts[m.group(0)], _PAGE)


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__JOB__ · samza-dsl</title>
<style>
:root{--fg:#1f2328;--mute:#59636e;--line:#d1d9e0;--bg:#f6f8fa;--accent:#0969da;--warn:#bc4c00;--behind:#8250df}
*{box-sizing:border-box}
body{margin:0;font:13px/1.4 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;
 color:var(--fg);background:#fff}
header{display:flex;flex-wrap:wrap;gap:6px 26px;align-items:center;padding:8px 18px;
 border-bottom:1px solid var(--line);background:var(--bg)}
header h1{font-size:16px;margin:0}
.big{display:flex;align-items:baseline;gap:6px}
.big .k{color:var(--mute)} .big b{font-size:24px;font-variant-numeric:tabular-nums}
#behind{color:var(--behind)}
#hchart{width:300px;height:40px;display:block}
.kv{color:var(--mute)} .kv b{color:var(--fg);font-variant-numeric:tabular-nums;font-weight:500}
.sec{display:flex;flex-direction:column;gap:0;font-size:12px}
#live{width:8px;height:8px;border-radius:50%;background:#aaa;display:inline-block;margin-right:6px}
#live.on{background:#1a7f37}
main{display:grid;grid-template-columns:minmax(380px,1fr) minmax(560px,1.05fr);gap:18px;padding:10px 18px}
section h2{font-size:12px;margin:6px 0 4px;color:var(--mute);text-transform:uppercase;letter-spacing:.04em}
h2 .mute{text-transform:none;letter-spacing:0;font-weight:400}
#dag svg{width:100%;height:auto;max-height:84vh}
#dag .live rect{fill:#fff;fill-opacity:.92;stroke:#0969da;stroke-width:.6}
#dag .live text{font:8.5px system-ui,Helvetica,sans-serif;fill:#0550ae;font-variant-numeric:tabular-nums}
#dag .live.late text.l{fill:var(--warn);font-weight:600}
#dag .lag text{fill:var(--behind);font-weight:600}
#dag .lag rect{stroke:var(--behind)}
table{border-collapse:collapse;width:100%;margin-bottom:8px;font-variant-numeric:tabular-nums}
th,td{padding:2px 6px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{color:var(--mute);font-weight:500;font-size:12px}
th:first-child,td:first-child{text-align:left;white-space:normal;word-break:break-all}
#gtasks td:first-child{white-space:nowrap;word-break:normal}
#gtasks td:nth-child(2),#gmembers td:first-child{white-space:normal;word-break:break-all;text-align:left}
td.viz{text-align:left;padding:1px 4px;line-height:0}
.spark{width:110px;height:22px}
.strip{width:256px;height:16px}
.strip rect.z{fill:#dafbe1}
#err{color:#cf222e}
.mute{color:var(--mute)}
</style></head><body>
<header><h1><span id="live"></span>__JOB__</h1>
<div class="big" title="over the input partitions: end offset − next offset to process, summed"><span class="k">behind</span><b id="behind">–</b></div>
<div class="big" title="input messages processed a second, over the last 2 s"><span class="k">rate</span><b id="rate">–</b><span class="k">msg/s</span></div>
<svg id="hchart" viewBox="0 0 300 40" preserveAspectRatio="none" aria-label="behind and lag since the checkpoint, last 5 minutes"></svg>
<div class="sec">
<span class="kv" title="end offset − offset after the checkpoint, summed over the inputs: what a restart now would read again; it climbs between two commits">lag since checkpoint <b id="cplag">–</b> · checkpoint age <b id="cpage">–</b></span>
<span class="kv">source <b id="source">–</b> · containers <b id="ncont">–</b> · updated <b id="updated">–</b></span></div>
<span id="err"></span></header>
<main>
<section id="plan"><h2>Plan</h2>__DAG__</section>
<section id="side">
<h2>Inputs <span class="mute">behind = end − processed; dashed: lag since checkpoint; cells: partitions, darker = further behind</span></h2>
<table id="inputs"><thead><tr><th>stream</th><th>behind</th><th>msg/s</th><th title="end offset − offset after the checkpoint">lag since checkpoint</th>
<th>last 5 min</th><th>partitions</th></tr></thead><tbody></tbody></table>
<h2>Operators</h2>
<table id="ops"><thead><tr><th>operator</th><th>msg/s</th><th>in</th><th>out</th>
<th>in flight</th><th>handle µs</th><th>late</th></tr></thead><tbody></tbody></table>
<h2>Streams</h2>
<table id="streams"><thead><tr><th>stream</th><th>kind</th><th title="the partitions this page reads (of the stream's, where a member of a group reads some)">partitions</th>
<th title="end offset − next offset to process">behind</th>
<th title="end offset − offset after the checkpoint">lag since checkpoint</th>
<th>end</th></tr></thead><tbody></tbody></table>
<div id="group" hidden><h2>Consumer group <span id="gsum" class="mute"></span></h2>
<table id="gmembers"><thead><tr><th>member</th><th>active tasks</th></tr></thead><tbody></tbody></table>
<table id="gtasks"><thead><tr><th>task</th><th>member</th><th title="end offset − checkpointed offset, over its input partitions; the tasks of other members show their lag on their own pages and in samza-dsl status">lag since checkpoint</th></tr></thead><tbody></tbody></table></div>
<h2>Containers</h2>
<table id="conts"><thead><tr><th>container</th><th>state</th><th>msg/s</th><th>processed</th>
<th>commits</th><th>last commit</th><th>loop busy</th></tr></thead><tbody></tbody></table>
</section></main>
<script id="state" type="application/json">__STATE__</script>
<script>
"use strict";
const NS="http://www.w3.org/2000/svg";
let svgReady=document.getElementById("dag").dataset.drawn==="1", fetching=false;
function fmt(n){if(n===null||n===undefined)return "–";n=Number(n);
 const a=Math.abs(n);if(a>=1e9)return (n/1e9).toFixed(1)+"G";if(a>=1e6)return (n/1e6).toFixed(1)+"M";
 if(a>=1e4)return (n/1e3).toFixed(1)+"k";if(Number.isInteger(n))return String(n);
 return a>=100?n.toFixed(0):n.toFixed(1)}
function secs(s){if(s===null||s===undefined)return "–";return s<60?s.toFixed(0)+" s":(s/60).toFixed(1)+" min"}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]))}
function el(tag,attrs){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);return e}
function badge(parent,key,x,y,lines,cls){
 let g=parent.querySelector('g.live[data-k="'+CSS.escape(key)+'"]');
 if(!g){g=el("g",{"class":"live "+(cls||""),"data-k":key});parent.appendChild(g);
  g.appendChild(el("rect",{rx:2,ry:2}));}
 g.querySelectorAll("text").forEach(t=>t.remove());
 let w=0;lines.forEach((ln,i)=>{const t=el("text",{x:x+3,y:y+9+i*10});t.textContent=ln[0];
  if(ln[1])t.setAttribute("class",ln[1]);g.appendChild(t);w=Math.max(w,t.getComputedTextLength())});
 // a badge at the drawing's right edge moves left, into the drawing, rather than be cut
 const vb=parent.ownerSVGElement&&parent.ownerSVGElement.viewBox.baseVal;
 if(vb&&vb.width&&x+w+6>vb.width-8){const dx=vb.width-8-w-6-x;x+=dx;
  g.querySelectorAll("text").forEach(t=>t.setAttribute("x",Number(t.getAttribute("x"))+dx))}
 const r=g.querySelector("rect");r.setAttribute("x",x);r.setAttribute("y",y);
 r.setAttribute("width",w+6);r.setAttribute("height",lines.length*10+3);
 g.classList.toggle("late",lines.some(l=>l[1]==="l"));return g}
function titleOf(g){const t=g.querySelector("title");return t?t.textContent:""}
function annotate(s){
 const root=document.querySelector("#dag svg g.graph");if(!root)return;
 for(const [op,o] of Object.entries(s.operators||{})){
  const node=document.getElementById(op);if(!node)continue;const b=node.getBBox();
  const lines=[[fmt(o.rate)+"/s · "+(o.in_flight?fmt(o.in_flight)+" in flight · ":"")+(o.handle_us==null?"–":fmt(o.handle_us))+" µs"]];
  if(o.late)lines.push(["late dropped "+fmt(o.late),"l"]);
  const g=badge(root,op,b.x+b.width-4,b.y+b.height-4,lines);g.dataset.op=op}
 const edges={};root.querySelectorAll("g.edge").forEach(e=>{edges[titleOf(e)]=e});
 const streams=s.streams||{};
 for(const [title,sid] of Object.entries(s.intermediate_edges||{})){
  const e=edges[title];if(!e||!streams[sid])continue;const texts=e.querySelectorAll("text");
  if(!texts.length)continue;const b=texts[texts.length-1].getBBox();
  badge(root,"lag:"+title,b.x+b.width+3,b.y-2,[["behind "+fmt(streams[sid].behind)]],"lag").dataset.stream=sid}
 const nodes={};root.querySelectorAll("g.node").forEach(n=>{nodes[titleOf(n)]=n});
 for(const [sid,title] of Object.entries(s.input_nodes||{})){
  const n=nodes[title];if(!n||!streams[sid])continue;const b=n.getBBox();
  badge(root,"lag:"+sid,b.x,b.y+b.height+1,[["behind "+fmt(streams[sid].behind)]],"lag").dataset.stream=sid}}
// a chart of [[seconds before now, behind, lag since checkpoint]]: behind filled, lag dashed
function trend(h,W,H){
 const max=Math.max(1,...h.map(x=>Math.max(x[1],x[2])));
 const span=Math.min(300,Math.max(60,...h.map(x=>-x[0])));
 const xy=(x,v)=>(W*(1+x/span)).toFixed(1)+","+(H-1-(H-4)*v/max).toFixed(1);
 const b=h.map(x=>xy(x[0],x[1])).join(" "),l=h.map(x=>xy(x[0],x[2])).join(" ");
 let out='<line x1="0" y1="'+(H-1)+'" x2="'+W+'" y2="'+(H-1)+'" stroke="#d1d9e0"/>';
 if(h.length){const x0=(W*(1+h[0][0]/span)).toFixed(1),x1=(W*(1+h[h.length-1][0]/span)).toFixed(1);
  out+='<path class="behind" d="M'+x0+","+(H-1)+" L"+b.replace(/ /g," L")+" L"+x1+","+(H-1)+'Z" fill="#8250df" fill-opacity=".18"/>'+
  '<polyline points="'+b+'" fill="none" stroke="#8250df" stroke-width="1.5" vector-effect="non-scaling-stroke"/>'+
  '<polyline class="cplag" points="'+l+'" fill="none" stroke="#8c959f" stroke-width="1" stroke-dasharray="3 2" vector-effect="non-scaling-stroke"/>'}
 return out+'<text x="2" y="9" font-size="8" fill="#59636e">'+fmt(max)+'</text>'}
// a stream's partitions in one strip: a cell each, 64 a line, darker the further behind
function strip(parts){
 const W=256,per=64,lines=Math.max(1,Math.ceil(parts.length/per)),cw=W/Math.min(per,Math.max(parts.length,1)),ch=16/lines;
 const max=Math.max(1,...parts.map(p=>p.behind));let out="";
 parts.forEach((p,i)=>{const x=(i%per)*cw,y=Math.floor(i/per)*ch,f=p.behind/max;
  out+='<rect data-p="'+esc(p.partition)+'" x="'+x.toFixed(2)+'" y="'+y.toFixed(2)+'" width="'+Math.max(1,cw-0.6).toFixed(2)+'" height="'+(ch-0.6).toFixed(2)+'"'+
   (p.behind?' fill="rgb('+Math.round(232-(232-88)*f)+','+Math.round(222-(222-38)*f)+','+Math.round(252-(252-159)*f)+')"':' class="z"')+
   '><title>p'+esc(p.partition)+': behind '+fmt(p.behind)+', lag since checkpoint '+fmt(p.lag)+', end '+fmt(p.end)+'</title></rect>'});
 return '<svg class="strip" viewBox="0 0 '+W+' 16" preserveAspectRatio="none" data-n="'+parts.length+'">'+out+'</svg>'}
function rows(id,html){document.querySelector("#"+id+" tbody").innerHTML=html}
function render(s){
 if(s.time===undefined)return;
 const hl=s.headline||{};
 document.getElementById("live").classList.add("on");
 document.getElementById("behind").textContent=fmt(hl.behind);
 document.getElementById("rate").textContent=fmt(hl.rate);
 document.getElementById("cplag").textContent=fmt(hl.lag);
 document.getElementById("hchart").innerHTML=trend(hl.history||[],300,40);
 document.getElementById("source").textContent=s.source||"–";
 document.getElementById("ncont").textContent=(s.containers||[]).length;
 document.getElementById("cpage").textContent=secs(s.checkpoint_age_s);
 document.getElementById("updated").textContent=new Date(s.time).toLocaleTimeString();
 document.getElementById("err").textContent=s.error||"";
 if(s.plan_ready&&!svgReady&&!fetching){fetching=true;fetch("plan.svg").then(r=>r.ok?r.text():Promise.reject(r.statusText))
  .then(t=>{const d=document.getElementById("dag");d.classList.remove("mute");d.innerHTML=t;svgReady=true;annotate(s)})
  .catch(e=>{document.getElementById("dag").textContent="no drawing: "+e}).finally(()=>{fetching=false})}
 if(svgReady)annotate(s);
 const streams=s.streams||{},parts={};
 (s.partitions||[]).forEach(p=>{(parts[p.stream]=parts[p.stream]||[]).push(p)});
 const inputs=Object.entries(streams).filter(([,v])=>v.kind==="input");
 rows("inputs",inputs.length?inputs.map(([sid,v])=>'<tr data-stream="'+esc(sid)+'"><td>'+esc(sid)+'</td><td class="behind">'+fmt(v.behind)+
  '</td><td class="rate">'+fmt(v.rate)+'</td><td class="lag">'+fmt(v.lag)+'</td><td class="viz"><svg class="spark" viewBox="0 0 110 22" preserveAspectRatio="none">'+
  trend(v.history||[],110,22)+'</svg></td><td class="viz">'+strip(parts[sid]||[])+'</td></tr>').join("")
  :'<tr><td class="mute" colspan="6">no input partitions reported yet</td></tr>');
 rows("ops",Object.entries(s.operators||{}).map(([op,o])=>'<tr data-op="'+esc(op)+'"><td>'+esc(op)+'</td><td class="rate">'+fmt(o.rate)+
  '</td><td>'+fmt(o.in)+'</td><td>'+fmt(o.out)+'</td><td>'+fmt(o.in_flight)+'</td><td>'+(o.handle_us==null?"–":fmt(o.handle_us))+
  '</td><td>'+fmt(o.late)+'</td></tr>').join(""));
 rows("streams",Object.entries(streams).map(([sid,v])=>'<tr data-stream="'+esc(sid)+'"><td>'+esc(sid)+'</td><td>'+esc(v.kind)+
  '</td><td class="parts">'+v.partitions+(v.of&&v.of!==v.partitions?" of "+v.of:"")+'</td><td class="behind">'+fmt(v.behind)+'</td><td class="lag">'+fmt(v.lag)+'</td><td class="end">'+fmt(v.end)+'</td></tr>').join(""));
 rows("conts",(s.containers||[]).map(c=>'<tr><td>'+esc(c.name)+'</td><td>'+esc(c.state||"")+'</td><td>'+fmt(c.rate)+'</td><td>'+fmt(c.processed)+
  '</td><td>'+fmt(c.commits)+'</td><td>'+(c.last_commit_s==null?"–":secs(c.last_commit_s)+" ago")+'</td><td>'+
  (c.utilization==null?"–":(100*c.utilization).toFixed(0)+"%")+'</td></tr>').join(""));
 const g=s.group;document.getElementById("group").hidden=!g;
 if(g){document.getElementById("gsum").textContent="generation "+g.generation+" · this page: "+g.member+" on "+g.host+
  (g.standby.length?" · standby "+g.standby.join(", "):"")+(g.restoring.length?" · restoring "+g.restoring.join(", "):"")+
  " · last rebalance "+(g.last_rebalance_at==null?"–":secs(Math.max(0,s.time/1000-g.last_rebalance_at))+" ago, took "+(g.last_rebalance_s==null?"–":g.last_rebalance_s.toFixed(2)+" s"));
  rows("gmembers",g.members.map(m=>'<tr><td>'+esc(m.member)+'</td><td>'+esc(m.active.join(", "))+'</td></tr>').join(""));
  rows("gtasks",g.tasks.map(t=>'<tr data-task="'+esc(t.task)+'"><td>'+esc(t.task)+'</td><td>'+esc(t.member||"–")+'</td><td class="lag">'+(t.lag==null?"–":fmt(t.lag))+'</td></tr>').join(""))}
 window.__state=s;window.__updates=(window.__updates||0)+1}
try{render(JSON.parse(document.getElementById("state").textContent))}catch(e){document.getElementById("err").textContent=String(e)}
const es=new EventSource("events");
es.onmessage=ev=>{try{render(JSON.parse(ev.data))}catch(e){document.getElementById("err").textContent=String(e)}};
es.onerror=()=>{document.getElementById("live").classList.remove("on")};
</script></body></html>
"""
