"""A small OTLP/HTTP receiver, the collector of tests/runtime/test_tracing.py: a process of its
own on 127.0.0.1 (a free port, printed on its first line) that decodes each
``POST /v1/traces`` and ``POST /v1/metrics`` with opentelemetry-proto and appends what it got
to the file given, one JSON object a line."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

KINDS: dict[str, tuple[Any, Any]] = {
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest,
                    metrics_service_pb2.ExportMetricsServiceResponse),
}


def spans(request: Any) -> list[dict[str, Any]]:
    out = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({"kind": "span", "name": s.name, "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                            "attributes": {a.key: MessageToDict(a.value) for a in s.attributes}})
    return out


def metrics(request: Any) -> list[dict[str, Any]]:
    return [{"kind": "metric", "name": m.name}
            for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]


def main() -> None:
    path = sys.argv[1]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            kind = KINDS.get(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if kind is None or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_response(404)
                self.end_headers()
                return
            request = kind[0]()
            request.ParseFromString(body)
            rows = spans(request) if self.path == "/v1/traces" else metrics(request)
            with open(path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            reply = kind[1]().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
