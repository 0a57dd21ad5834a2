package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline. */
public class GlobalWindowAccumulating extends WindowPipeline {
  public GlobalWindowAccumulating() {
    super(false, AccumulationMode.ACCUMULATING);
  }
}
