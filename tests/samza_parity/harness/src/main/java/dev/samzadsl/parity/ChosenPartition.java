package dev.samzadsl.parity;

import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.system.OutgoingMessageEnvelope;
import org.apache.samza.system.SystemStream;

/**
 * A sink that sends each message to an output partition the application gives, through the
 * MessageCollector: the envelope's partition key is the Integer value, which the in-memory
 * system (as Samza's Kafka producer) places in abs(hashCode) % partitions, value % partitions;
 * the message keeps a key of its own.
 */
public class ChosenPartition extends Pipeline {
  public ChosenPartition() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    // the sink function is serialized with the application: it makes its SystemStream itself
    app.getInputStream(input("in"))
        .sink((kv, collector, coordinator) -> collector.send(new OutgoingMessageEnvelope(
            new SystemStream(SYSTEM, "out"), intOf(kv.getValue()), "u" + intOf(kv.getValue()) % 7,
            kv.getValue())));
  }
}
