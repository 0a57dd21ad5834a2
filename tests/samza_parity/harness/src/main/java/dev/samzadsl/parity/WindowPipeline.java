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
import org.apache.samza.operators.triggers.FiringType;
import org.apache.samza.operators.triggers.Trigger;
import org.apache.samza.operators.triggers.Triggers;
import org.apache.samza.operators.windows.AccumulationMode;
import org.apache.samza.operators.windows.WindowPane;
import org.apache.samza.operators.windows.Windows;
import org.apache.samza.serializers.JsonSerdeV2;
import org.apache.samza.serializers.StringSerde;

/**
 * A tumbling window too long to close while a test runs (1000 days), with the early trigger
 * repeat(count(3)), or count(3) once: its panes do not depend on the wall clock. Keyed by the
 * message's key, or global (one pane per task); on the input, or after a partitionBy on the
 * message's key; its messages kept as they are, or folded into the list of their values. A pane
 * goes out as KV(key, {"firing", "values"}).
 */
public abstract class WindowPipeline extends Pipeline {
  public static final Duration SIZE = Duration.ofDays(1000);
  public static final int EARLY_COUNT = 3;
  private final boolean keyed;
  private final AccumulationMode mode;
  private final boolean repartitioned;
  private final boolean repeating;
  private final boolean fold;

  protected WindowPipeline(boolean keyed, AccumulationMode mode) {
    this(keyed, mode, false, true, false);
  }

  protected WindowPipeline(boolean keyed, AccumulationMode mode, boolean repartitioned, boolean repeating,
      boolean fold) {
    this.keyed = keyed;
    this.mode = mode;
    this.repartitioned = repartitioned;
    this.repeating = repeating;
    this.fold = fold;
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    MessageStream<KV<String, Object>> in = app.getInputStream(input("in"));
    if (repartitioned) {
      in = in.partitionBy(kv -> kv.getKey(), kv -> kv.getValue(), INTERMEDIATE, "by-key");
    }
    Trigger<KV<String, Object>> early = repeating
        ? Triggers.repeat(Triggers.count(EARLY_COUNT)) : Triggers.count(EARLY_COUNT);
    MessageStream<KV<String, Object>> panes;
    if (fold) {
      panes = in.window(Windows.<KV<String, Object>, String, Object>keyedTumblingWindow(
              kv -> kv.getKey(), SIZE, () -> new ArrayList<Object>(), WindowPipeline::append,
              new StringSerde(), new JsonSerdeV2<>(Object.class))
          .setEarlyTrigger(early)
          .setAccumulationMode(mode), "w")
          .map(pane -> KV.of(pane.getKey().getKey(), paneValue(pane.getFiringType(), (List<?>) pane.getMessage())));
    } else if (keyed) {
      panes = in.window(Windows.<KV<String, Object>, String>keyedTumblingWindow(
              kv -> kv.getKey(), SIZE, new StringSerde(), INTERMEDIATE)
          .setEarlyTrigger(early)
          .setAccumulationMode(mode), "w")
          .map(pane -> KV.of(pane.getKey().getKey(), paneValue(pane)));
    } else {
      panes = in.window(Windows.<KV<String, Object>>tumblingWindow(SIZE, INTERMEDIATE)
          .setEarlyTrigger(early)
          .setAccumulationMode(mode), "w")
          .map(pane -> KV.of(null, paneValue(pane)));
    }
    panes.sendTo(app.getOutputStream(output("out")));
  }

  private static Object append(KV<String, Object> kv, Object folded) {
    List<Object> values = new ArrayList<>((List<?>) folded);
    values.add(kv.getValue());
    return values;
  }

  private static Object paneValue(WindowPane<?, Collection<KV<String, Object>>> pane) {
    List<Object> values = new ArrayList<>();
    for (KV<String, Object> kv : pane.getMessage()) {
      values.add(kv.getValue());
    }
    return paneValue(pane.getFiringType(), values);
  }

  private static Object paneValue(FiringType firing, List<?> values) {
    Map<String, Object> value = new LinkedHashMap<>();
    value.put("firing", firing.name());
    value.put("values", values);
    return value;
  }
}
