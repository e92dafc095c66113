package dev.progresscontrol.kafka.streams.example;

import java.util.concurrent.atomic.AtomicLong;

/** How often the example's user functions ran. */
public final class CallCounts {
    public final AtomicLong initializer = new AtomicLong();
    public final AtomicLong aggregator = new AtomicLong();
    public final AtomicLong merger = new AtomicLong();

    @Override
    public String toString() {
        return "initializer=" + initializer + " aggregator=" + aggregator + " merger=" + merger;
    }
}
