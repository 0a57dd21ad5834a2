package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline: a keyed window whose early trigger count(3) fires once per pane. */
public class KeyedWindowOnce extends WindowPipeline {
  public KeyedWindowOnce() {
    super(true, AccumulationMode.DISCARDING, false, false, false);
  }
}
