package dev.samzadsl.parity;

import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.serializers.IntegerSerde;
import org.apache.samza.serializers.KVSerde;
import org.apache.samza.serializers.StringSerde;
import org.apache.samza.storage.kv.inmemory.descriptors.InMemoryTableDescriptor;

/** Two partitionBys in a row, a map between, then a running count per key. */
public class TwoPartitionBys extends Pipeline {
  public TwoPartitionBys() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getTable(new InMemoryTableDescriptor<>(Count.TABLE, KVSerde.of(new StringSerde(), new IntegerSerde())));
    app.getInputStream(input("in"))
        .partitionBy(kv -> "h" + intOf(kv.getValue()) % 4, kv -> kv.getValue(), INTERMEDIATE, "first")
        .map(kv -> KV.<String, Object>of(kv.getKey(), intOf(kv.getValue()) * 10))
        .partitionBy(kv -> "g" + intOf(kv.getValue()) % 3, kv -> kv.getValue(), INTERMEDIATE, "second")
        .map(new Count())
        .sendTo(app.getOutputStream(output("out")));
  }
}
