package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline. */
public class KeyedWindowAccumulating extends WindowPipeline {
  public KeyedWindowAccumulating() {
    super(true, AccumulationMode.ACCUMULATING);
  }
}
