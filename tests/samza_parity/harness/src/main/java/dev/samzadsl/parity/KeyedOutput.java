package dev.samzadsl.parity;

import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;

/** sendTo an output under a key the application gives: the output's partition follows the key. */
public class KeyedOutput extends Pipeline {
  public KeyedOutput() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getInputStream(input("in"))
        .map(kv -> KV.<String, Object>of("u" + intOf(kv.getValue()) % 7, kv.getValue()))
        .sendTo(app.getOutputStream(output("out")));
  }
}
