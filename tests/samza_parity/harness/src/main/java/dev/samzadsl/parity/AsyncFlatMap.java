package dev.samzadsl.parity;

import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;

/**
 * flatMapAsync whose results complete after a delay of their own (0, 3, 6 or 9 ms): with
 * task.max.concurrency > 1 a later message may complete first.
 */
public class AsyncFlatMap extends Pipeline {
  public AsyncFlatMap() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    app.getInputStream(input("in"))
        .flatMapAsync(kv -> {
          int value = intOf(kv.getValue());
          Collection<KV<String, Object>> results = value % 5 == 0
              ? Collections.emptyList()
              : Arrays.asList(KV.of(kv.getKey(), value), KV.of(kv.getKey(), -value));
          return CompletableFuture.supplyAsync(() -> results,
              CompletableFuture.delayedExecutor(3L * (value % 4), TimeUnit.MILLISECONDS));
        })
        .sendTo(app.getOutputStream(output("out")));
  }
}
