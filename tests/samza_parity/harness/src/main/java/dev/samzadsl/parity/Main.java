package dev.samzadsl.parity;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.samza.Partition;
import org.apache.samza.config.Config;
import org.apache.samza.config.MapConfig;
import org.apache.samza.operators.KV;
import org.apache.samza.system.IncomingMessageEnvelope;
import org.apache.samza.system.SystemConsumer;
import org.apache.samza.system.SystemStreamMetadata;
import org.apache.samza.system.SystemStreamPartition;
import org.apache.samza.system.inmemory.InMemorySystemFactory;
import org.apache.samza.test.framework.TestRunner;
import org.apache.samza.serializers.NoOpSerde;
import org.apache.samza.test.framework.system.descriptors.InMemoryOutputDescriptor;
import org.apache.samza.test.framework.system.descriptors.InMemorySystemDescriptor;

/**
 * Runs a named pipeline on Samza's TestRunner.
 *
 * <pre>
 * run PIPELINE STREAM=PARTITIONS... [-c KEY=VALUE]...
 *     input messages on stdin, output messages on stdout, one JSON object a line:
 *     {"stream": ..., "partition": ..., "key": ..., "value": ...}; every input and output
 *     stream of the pipeline is named with its partition count
 * serve
 *     one case a line on stdin, {"pipeline", "partitions", "config", "messages"}, and one
 *     answer a line on stdout, {"messages": [...]} or {"error": "..."}, until stdin ends
 * </pre>
 *
 * Outputs are written partition by partition, each in offset order.
 */
public final class Main {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Duration RUN_TIMEOUT = Duration.ofSeconds(120);

  private Main() {
  }

  public static void main(String[] args) throws Exception {
    // stdout carries only the answers: whatever else prints goes to stderr
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    if (args.length >= 1 && args[0].equals("serve")) {
      serve(in, out);
    } else if (args.length >= 2 && args[0].equals("run")) {
      run(args, in, out);
    } else {
      System.err.println("usage: run PIPELINE STREAM=PARTITIONS... [-c KEY=VALUE]... | serve");
      System.exit(2);
    }
    System.exit(0);
  }

  private static void run(String[] args, BufferedReader in, PrintStream out) throws Exception {
    Map<String, Integer> partitions = new HashMap<>();
    Map<String, String> config = new HashMap<>();
    for (int i = 2; i < args.length; i++) {
      if (args[i].equals("-c") && i + 1 < args.length) {
        String[] kv = args[++i].split("=", 2);
        config.put(kv[0], kv[1]);
      } else {
        String[] kv = args[i].split("=", 2);
        partitions.put(kv[0], Integer.parseInt(kv[1]));
      }
    }
    List<JsonNode> messages = new ArrayList<>();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (!line.isBlank()) {
        messages.add(JSON.readTree(line));
      }
    }
    for (JsonNode message : runCase(args[1], partitions, config, messages)) {
      out.println(JSON.writeValueAsString(message));
    }
  }

  private static void serve(BufferedReader in, PrintStream out) throws Exception {
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (line.isBlank()) {
        continue;
      }
      ObjectNode answer = JSON.createObjectNode();
      try {
        JsonNode request = JSON.readTree(line);
        Map<String, Integer> partitions = new HashMap<>();
        request.get("partitions").fields().forEachRemaining(e -> partitions.put(e.getKey(), e.getValue().asInt()));
        Map<String, String> config = new HashMap<>();
        if (request.has("config")) {
          request.get("config").fields().forEachRemaining(e -> config.put(e.getKey(), e.getValue().asText()));
        }
        List<JsonNode> messages = new ArrayList<>();
        request.get("messages").forEach(messages::add);
        answer.putArray("messages").addAll(runCase(request.get("pipeline").asText(), partitions, config, messages));
      } catch (Throwable e) {
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        answer.put("error", trace.toString());
      }
      out.println(JSON.writeValueAsString(answer));
    }
  }

  static List<JsonNode> runCase(String name, Map<String, Integer> partitions, Map<String, String> config,
      List<JsonNode> messages) throws Exception {
    Pipeline pipeline = (Pipeline) Class.forName(Main.class.getPackageName() + "." + name)
        .getDeclaredConstructor().newInstance();
    TestRunner runner = TestRunner.of(pipeline);
    // no JMX server per run: nothing reads it
    runner.addConfig("job.jmx.enabled", "false");
    config.forEach(runner::addConfig);

    Map<String, Map<Integer, List<KV<String, Object>>>> inputs = new LinkedHashMap<>();
    for (String stream : pipeline.inputs()) {
      Map<Integer, List<KV<String, Object>>> byPartition = new HashMap<>();
      for (int p = 0; p < partitionCount(partitions, stream); p++) {
        byPartition.put(p, new ArrayList<>());
      }
      inputs.put(stream, byPartition);
    }
    for (JsonNode message : messages) {
      String stream = message.get("stream").asText();
      if (!inputs.containsKey(stream)) {
        throw new IllegalArgumentException(name + " has no input stream " + stream);
      }
      JsonNode key = message.get("key");
      inputs.get(stream).get(message.get("partition").asInt()).add(
          KV.of(key == null || key.isNull() ? null : key.asText(), JSON.treeToValue(message.get("value"), Object.class)));
    }
    InMemorySystemDescriptor system = new InMemorySystemDescriptor(Pipeline.SYSTEM);
    for (String stream : pipeline.inputs()) {
      runner.addInputStream(system.getInputDescriptor(stream, new NoOpSerde<>()), inputs.get(stream));
    }
    Map<String, InMemoryOutputDescriptor<Object>> outputs = new LinkedHashMap<>();
    for (String stream : pipeline.outputs()) {
      outputs.put(stream, system.getOutputDescriptor(stream, new NoOpSerde<>()));
      runner.addOutputStream(outputs.get(stream), partitionCount(partitions, stream));
    }
    runner.run(RUN_TIMEOUT);

    List<JsonNode> written = new ArrayList<>();
    for (Map.Entry<String, InMemoryOutputDescriptor<Object>> output : outputs.entrySet()) {
      written.addAll(consume(output.getKey(), output.getValue()));
    }
    return written;
  }

  private static int partitionCount(Map<String, Integer> partitions, String stream) {
    Integer count = partitions.get(stream);
    if (count == null) {
      throw new IllegalArgumentException("no partition count for stream " + stream);
    }
    return count;
  }

  /** Every message of an output stream, partition by partition, in offset order. */
  private static List<JsonNode> consume(String streamId, InMemoryOutputDescriptor<?> descriptor) throws Exception {
    String systemName = descriptor.getSystemName();
    Config config = new MapConfig(descriptor.toConfig(), descriptor.getSystemDescriptor().toConfig());
    InMemorySystemFactory factory = new InMemorySystemFactory();
    String physicalName = descriptor.getPhysicalName().orElse(streamId);
    SystemStreamMetadata metadata = factory.getAdmin(systemName, config)
        .getSystemStreamMetadata(Collections.singleton(physicalName)).get(physicalName);
    SystemConsumer consumer = factory.getConsumer(systemName, config, null);
    Map<Integer, SystemStreamPartition> ssps = new TreeMap<>();
    for (Partition partition : metadata.getSystemStreamPartitionMetadata().keySet()) {
      SystemStreamPartition ssp = new SystemStreamPartition(systemName, physicalName, partition);
      ssps.put(partition.getPartitionId(), ssp);
      consumer.register(ssp, "0");
    }
    Map<SystemStreamPartition, List<IncomingMessageEnvelope>> polled =
        consumer.poll(new HashSet<>(ssps.values()), 0);
    List<JsonNode> written = new ArrayList<>();
    for (Map.Entry<Integer, SystemStreamPartition> entry : ssps.entrySet()) {
      List<IncomingMessageEnvelope> envelopes = polled.getOrDefault(entry.getValue(), Collections.emptyList());
      for (Iterator<IncomingMessageEnvelope> it = envelopes.iterator(); it.hasNext();) {
        IncomingMessageEnvelope envelope = it.next();
        if (envelope.isEndOfStream()) {
          continue;
        }
        ObjectNode message = JSON.createObjectNode();
        message.put("stream", streamId);
        message.put("partition", entry.getKey());
        message.set("key", JSON.valueToTree(envelope.getKey()));
        message.set("value", JSON.valueToTree(envelope.getMessage()));
        written.add(message);
      }
    }
    return written;
  }
}
