package dev.samzadsl.parity;

import java.time.Duration;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.operators.functions.JoinFunction;
import org.apache.samza.serializers.StringSerde;

/** A stream-stream join on the messages' keys within a TTL of an hour. */
public class StreamJoin extends Pipeline {
  public StreamJoin() {
    input("left");
    input("right");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getInputStream(input("left"))
        .join(app.getInputStream(input("right")),
            new Combine(), new StringSerde(), INTERMEDIATE, INTERMEDIATE, Duration.ofHours(1), "j")
        .sendTo(app.getOutputStream(output("out")));
  }

  /** "left:right" under the key; a static class, so that Samza can serialize it. */
  static class Combine implements JoinFunction<String, KV<String, Object>, KV<String, Object>, KV<String, Object>> {
    @Override
    public KV<String, Object> apply(KV<String, Object> left, KV<String, Object> right) {
      return KV.of(left.getKey(), left.getValue() + ":" + right.getValue());
    }

    @Override
    public String getFirstKey(KV<String, Object> message) {
      return message.getKey();
    }

    @Override
    public String getSecondKey(KV<String, Object> message) {
      return message.getKey();
    }
  }
}
