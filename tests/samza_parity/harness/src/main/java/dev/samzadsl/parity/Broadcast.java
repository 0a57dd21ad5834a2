package dev.samzadsl.parity;

import java.util.Map;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;

/**
 * A broadcast stream: every task reads all of it. Samza broadcasts a message under a null key
 * with the whole KV as the value (BroadcastOperatorImpl), so the reader takes the key and value
 * out of the JSON object {"key", "value"} the KV was written as.
 */
public class Broadcast extends Pipeline {
  public Broadcast() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getInputStream(input("in"))
        .broadcast(INTERMEDIATE, "bc")
        .map(kv -> {
          Map<?, ?> sent = (Map<?, ?>) kv.getValue();
          return KV.<String, Object>of((String) sent.get("key"), intOf(sent.get("value")) + 1);
        })
        .sendTo(app.getOutputStream(output("out")));
  }
}
