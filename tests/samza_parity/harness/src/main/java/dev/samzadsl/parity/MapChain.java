package dev.samzadsl.parity;

import java.util.Arrays;
import java.util.Collections;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;

/** filter, map, flatMap, map (a null result dropped): each message stays in its task. */
public class MapChain extends Pipeline {
  public MapChain() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getInputStream(input("in"))
        .filter(kv -> intOf(kv.getValue()) % 3 != 0)
        .map(kv -> KV.<String, Object>of(kv.getKey(), intOf(kv.getValue()) * 2))
        .flatMap(kv -> intOf(kv.getValue()) % 4 == 0
            ? Arrays.asList(kv, KV.<String, Object>of(kv.getKey() + "-x", intOf(kv.getValue()) + 1))
            : Collections.singletonList(kv))
        .map(kv -> intOf(kv.getValue()) % 7 == 0 ? null : KV.<String, Object>of(kv.getKey(), "v" + kv.getValue()))
        .sendTo(app.getOutputStream(output("out")));
  }
}
