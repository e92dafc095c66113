package dev.progresscontrol.core;

/** A {@code progress-control} header is present but cannot be parsed as a control marker. */
public class MalformedControlHeaderException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public MalformedControlHeaderException(String message) {
        super(message);
    }
}
