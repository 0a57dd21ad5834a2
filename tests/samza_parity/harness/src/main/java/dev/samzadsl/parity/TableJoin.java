package dev.samzadsl.parity;

import org.apache.samza.application.descriptors.StreamApplicationDescriptor;
import org.apache.samza.operators.KV;
import org.apache.samza.operators.MessageStream;
import org.apache.samza.table.Table;
import org.apache.samza.storage.kv.inmemory.descriptors.InMemoryTableDescriptor;

/** One stream fills a table (even values) and is joined with it (odd values). */
public class TableJoin extends Pipeline {
  public TableJoin() {
    input("in");
    output("out");
  }

  @Override
  public void describe(StreamApplicationDescriptor app) {
    Table<KV<String, Object>> table = app.getTable(new InMemoryTableDescriptor<>("t", INTERMEDIATE));
    MessageStream<KV<String, Object>> in = app.getInputStream(input("in"));
    in.filter(kv -> intOf(kv.getValue()) % 2 == 0).sendTo(table);
    in.filter(kv -> intOf(kv.getValue()) % 2 != 0)
        .join(table, JoinFunctions.lookup())
        .sendTo(app.getOutputStream(output("out")));
  }
}
