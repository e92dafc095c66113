package dev.progresscontrol.flink;

/** A {@code progress-control} header is present but is not a valid control marker. */
public final class MalformedControlHeaderException extends Exception {
    private static final long serialVersionUID = 1L;

    public MalformedControlHeaderException(String message) {
        super(message);
    }
}
