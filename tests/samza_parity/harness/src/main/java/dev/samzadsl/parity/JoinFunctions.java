package dev.samzadsl.parity;

import org.apache.samza.operators.KV;
import org.apache.samza.operators.functions.StreamTableJoinFunction;

/** The stream-table join of TableJoin and SideInputJoin: "value:record", or "value:-" on a miss. */
public final class JoinFunctions {
  private JoinFunctions() {
  }

  public static StreamTableJoinFunction<String, KV<String, Object>, KV<String, Object>, KV<String, Object>> lookup() {
    return new StreamTableJoinFunction<String, KV<String, Object>, KV<String, Object>, KV<String, Object>>() {
      @Override
      public KV<String, Object> apply(KV<String, Object> message, KV<String, Object> record) {
        return KV.of(message.getKey(), message.getValue() + ":" + (record == null ? "-" : record.getValue()));
      }

      @Override
      public String getMessageKey(KV<String, Object> message) {
        return message.getKey();
      }

      @Override
      public String getRecordKey(KV<String, Object> record) {
        return record.getKey();
      }
    };
  }
}
