package dev.progresscontrol.kafka.streams;

/**
 * The control record a {@link Controlled} processor is forwarding on this thread, so that a
 * {@link MulticastControlPartitioner} (whose API sees no headers) can tell it from data. Kafka
 * Streams forwards synchronously, so a repartition sink downstream of the processor partitions
 * the record inside the processor's {@code forward} call.
 */
final class TickScope {

    private static final ThreadLocal<Object> CURRENT_KEY = new ThreadLocal<>();

    private TickScope() {
    }

    /** Run {@code forward} with {@code key} (the tick's key object) in scope. */
    static void forwarding(Object key, Runnable forward) {
        Object previous = CURRENT_KEY.get();
        CURRENT_KEY.set(key == null ? NULL_KEY : key);
        try {
            forward.run();
        } finally {
            if (previous == null) {
                CURRENT_KEY.remove();
            } else {
                CURRENT_KEY.set(previous);
            }
        }
    }

    /** Whether a record with this key and value is the control record in scope. */
    static boolean isCurrentTick(Object key, Object value) {
        Object current = CURRENT_KEY.get();
        return current != null && value == null && current == (key == null ? NULL_KEY : key);
    }

    private static final Object NULL_KEY = new Object();
}
