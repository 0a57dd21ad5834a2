package dev.samzadsl.parity;

import java.util.Collections;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.operators.MessageStream;

/** Two inputs, each tagged by a map, merged. */
public class Merge extends Pipeline {
  public Merge() {
    input("in1");
    input("in2");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    MessageStream<KV<String, Object>> first = app.getInputStream(input("in1"))
        .map(kv -> KV.<String, Object>of(kv.getKey(), "a" + kv.getValue()));
    MessageStream<KV<String, Object>> second = app.getInputStream(input("in2"))
        .map(kv -> KV.<String, Object>of(kv.getKey(), "b" + kv.getValue()));
    first.merge(Collections.singletonList(second)).sendTo(app.getOutputStream(output("out")));
  }
}
