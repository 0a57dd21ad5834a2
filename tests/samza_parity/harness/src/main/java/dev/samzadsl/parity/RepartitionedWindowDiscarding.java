package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/**
 * See WindowPipeline: a keyed window after a partitionBy on the message's key. In a job with an
 * intermediate stream, Samza hands end-of-stream to the window, which fires then.
 */
public class RepartitionedWindowDiscarding extends WindowPipeline {
  public RepartitionedWindowDiscarding() {
    super(true, AccumulationMode.DISCARDING, true, true, false);
  }
}
