package dev.samzadsl.parity;

import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.serializers.IntegerSerde;
import org.apache.samza.serializers.KVSerde;
import org.apache.samza.serializers.StringSerde;
import org.apache.samza.storage.kv.inmemory.descriptors.InMemoryTableDescriptor;

/** partitionBy a key of the value, then a running count per key. */
public class PartitionByCount extends Pipeline {
  public PartitionByCount() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getTable(new InMemoryTableDescriptor<>(Count.TABLE, KVSerde.of(new StringSerde(), new IntegerSerde())));
    app.getInputStream(input("in"))
        .partitionBy(kv -> "g" + intOf(kv.getValue()) % 5, kv -> kv.getValue(), INTERMEDIATE, "by-group")
        .map(new Count())
        .sendTo(app.getOutputStream(output("out")));
  }
}
