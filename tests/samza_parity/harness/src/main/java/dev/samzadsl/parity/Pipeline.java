package dev.samzadsl.parity;

import java.util.LinkedHashSet;
import java.util.Set;
import org.apache.samza.application.StreamApplication;
import org.apache.samza.operators.KV;
import org.apache.samza.serializers.JsonSerdeV2;
import org.apache.samza.serializers.KVSerde;
import org.apache.samza.serializers.NoOpSerde;
import org.apache.samza.serializers.StringSerde;
import org.apache.samza.system.descriptors.GenericInputDescriptor;
import org.apache.samza.system.descriptors.GenericOutputDescriptor;
import org.apache.samza.system.descriptors.GenericSystemDescriptor;
import org.apache.samza.system.inmemory.InMemorySystemFactory;

/**
 * A high-level application whose inputs and outputs are keyed streams (a KVSerde) of Samza's
 * in-memory system: every message is a KV of a String key and a JSON value (Integer, String,
 * List or Map). The entry point feeds the inputs through TestRunner's in-memory descriptors of
 * the same streams (which carry no serde: TestRunner passes objects as they are). Each subclass
 * is the counterpart of one samza-dsl pipeline in tests/samza_parity.
 */
public abstract class Pipeline implements StreamApplication {
  /** The system every input and output is on; the entry point feeds it under this name. */
  public static final String SYSTEM = "parity";
  /** The serde of every intermediate stream (partitionBy, broadcast). */
  public static final KVSerde<String, Object> INTERMEDIATE =
      KVSerde.of(new StringSerde(), new JsonSerdeV2<>(Object.class));
  private static final KVSerde<String, Object> KEYED = KVSerde.of(new NoOpSerde<>(), new NoOpSerde<>());

  private final GenericSystemDescriptor system =
      new GenericSystemDescriptor(SYSTEM, InMemorySystemFactory.class.getName());
  private final Set<String> inputs = new LinkedHashSet<>();
  private final Set<String> outputs = new LinkedHashSet<>();

  /** A keyed input stream the entry point feeds (also a side input, read by no operator). */
  protected GenericInputDescriptor<KV<String, Object>> input(String streamId) {
    inputs.add(streamId);
    return system.getInputDescriptor(streamId, KEYED);
  }

  protected GenericOutputDescriptor<KV<String, Object>> output(String streamId) {
    outputs.add(streamId);
    return system.getOutputDescriptor(streamId, KEYED);
  }

  /** The streams the entry point feeds, declared in the constructor. */
  public Set<String> inputs() {
    return inputs;
  }

  /** The streams the entry point reads once the run has ended, declared in the constructor. */
  public Set<String> outputs() {
    return outputs;
  }

  protected static int intOf(Object value) {
    return ((Number) value).intValue();
  }
}
