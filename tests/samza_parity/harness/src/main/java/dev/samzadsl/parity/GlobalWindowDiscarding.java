package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/** See WindowPipeline. */
public class GlobalWindowDiscarding extends WindowPipeline {
  public GlobalWindowDiscarding() {
    super(false, AccumulationMode.DISCARDING);
  }
}
