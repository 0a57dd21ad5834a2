package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline: a keyed window that folds its messages into the list of their values. */
public class KeyedFoldWindowDiscarding extends WindowPipeline {
  public KeyedFoldWindowDiscarding() {
    super(true, AccumulationMode.DISCARDING, false, true, true);
  }
}
