package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline. */
public class KeyedWindowDiscarding extends WindowPipeline {
  public KeyedWindowDiscarding() {
    super(true, AccumulationMode.DISCARDING);
  }
}
