package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline: a keyed window that folds its messages into the list of their values. */
public class KeyedFoldWindowAccumulating extends WindowPipeline {
  public KeyedFoldWindowAccumulating() {
    super(true, AccumulationMode.ACCUMULATING, false, true, true);
  }
}
