package dev.samzadsl.parity;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.operators.MessageStream;
import org.apache.samza.operators.triggers.Triggers;
import org.apache.samza.operators.windows.AccumulationMode;
import org.apache.samza.operators.windows.WindowPane;
import org.apache.samza.operators.windows.Windows;
import org.apache.samza.serializers.StringSerde;

/**
 * A tumbling window too long to close while a test runs (1000 days), with the early trigger
 * repeat(count(3)): its panes do not depend on the wall clock. Keyed by the message's key, or
 * global (one pane per task); on the input, or after a partitionBy on the message's key. A pane
 * goes out as KV(key, {"firing", "values"}).
 */
public abstract class WindowPipeline extends Pipeline {
  public static final Duration SIZE = Duration.ofDays(1000);
  public static final int EARLY_COUNT = 3;
  private final boolean keyed;
  private final AccumulationMode mode;
  private final boolean repartitioned;

  protected WindowPipeline(boolean keyed, AccumulationMode mode) {
    this(keyed, mode, false);
  }

  protected WindowPipeline(boolean keyed, AccumulationMode mode, boolean repartitioned) {
    this.keyed = keyed;
    this.mode = mode;
    this.repartitioned = repartitioned;
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    MessageStream<KV<String, Object>> in = app.getInputStream(input("in"));
    if (repartitioned) {
      in = in.partitionBy(kv -> kv.getKey(), kv -> kv.getValue(), INTERMEDIATE, "by-key");
    }
    MessageStream<KV<String, Object>> panes;
    if (keyed) {
      panes = in.window(Windows.<KV<String, Object>, String>keyedTumblingWindow(
              kv -> kv.getKey(), SIZE, new StringSerde(), INTERMEDIATE)
          .setEarlyTrigger(Triggers.repeat(Triggers.count(EARLY_COUNT)))
          .setAccumulationMode(mode), "w")
          .map(pane -> KV.of(pane.getKey().getKey(), paneValue(pane)));
    } else {
      panes = in.window(Windows.<KV<String, Object>>tumblingWindow(SIZE, INTERMEDIATE)
          .setEarlyTrigger(Triggers.repeat(Triggers.count(EARLY_COUNT)))
          .setAccumulationMode(mode), "w")
          .map(pane -> KV.of(null, paneValue(pane)));
    }
    panes.sendTo(app.getOutputStream(output("out")));
  }

  private static Object paneValue(WindowPane<?, Collection<KV<String, Object>>> pane) {
    List<Object> values = new ArrayList<>();
    for (KV<String, Object> kv : pane.getMessage()) {
      values.add(kv.getValue());
    }
    Map<String, Object> value = new LinkedHashMap<>();
    value.put("firing", pane.getFiringType().name());
    value.put("values", values);
    return value;
  }
}
