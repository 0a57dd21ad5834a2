package dev.samzadsl.parity;

import java.util.Arrays;
import org.apache.samza.context.Context;
import org.apache.samza.operators.functions.MapFunction;
import org.apache.samza.operators.KV;
import org.apache.samza.table.ReadWriteTable;

/** A stateful step: each key's running count, kept in the task's table "counts". */
public class Count implements MapFunction<KV<String, Object>, KV<String, Object>> {
  public static final String TABLE = "counts";
  private transient ReadWriteTable<String, Integer> counts;

  @Override
  public void init(Context context) {
    counts = context.getTaskContext().getTable(TABLE);
  }

  @Override
  public KV<String, Object> apply(KV<String, Object> kv) {
    Integer seen = counts.get(kv.getKey());
    int count = seen == null ? 1 : seen + 1;
    counts.put(kv.getKey(), count);
    return KV.of(kv.getKey(), Arrays.asList(count, kv.getValue()));
  }
}
