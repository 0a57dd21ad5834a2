package dev.samzadsl.parity;

import org.apache.samza.operators.windows.AccumulationMode;

/**
 * See WindowPipeline: a keyed window after a partitionBy on the message's key. In a job with an
 * intermediate stream, Samza hands end-of-stream to the window, which fires then.
 */
public class RepartitionedWindowAccumulating extends WindowPipeline {
  public RepartitionedWindowAccumulating() {
    super(true, AccumulationMode.ACCUMULATING, true, true, false);
  }
}
