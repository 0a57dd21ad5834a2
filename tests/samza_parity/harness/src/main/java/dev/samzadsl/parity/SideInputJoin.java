package dev.samzadsl.parity;

import java.util.Collections;
import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.storage.kv.Entry;
import org.apache.samza.storage.kv.inmemory.descriptors.InMemoryTableDescriptor;
import org.apache.samza.table.Table;

/** A table filled by the side input "side", joined with the input. */
public class SideInputJoin extends Pipeline {
  public SideInputJoin() {
    input("in");
    input("side");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    Table<KV<String, Object>> table = app.getTable(new InMemoryTableDescriptor<String, Object>("t", INTERMEDIATE)
        .withSideInputs(Collections.singletonList("side"))
        .withSideInputsProcessor((message, store) ->
            Collections.singletonList(new Entry<>(message.getKey(), message.getMessage()))));
    app.getInputStream(input("in"))
        .join(table, JoinFunctions.lookup())
        .sendTo(app.getOutputStream(output("out")));
  }
}
