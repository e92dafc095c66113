package dev.progresscontrol.flink;

/**
 * What the validator decided about a control record; every value but {@link #ACCEPTED} is the
 * reason it was skipped (as {@code progress_control.trust.Verdict} on the Python side).
 */
public enum Verdict {
    ACCEPTED("accepted"),
    MALFORMED("malformed"),
    NEGATIVE_TIMESTAMP("negative-timestamp"),
    FUTURE_TIMESTAMP("future-timestamp"),
    SOURCE_NOT_ALLOWED("source-not-allowed"),
    UNSIGNED("unsigned"),
    UNKNOWN_KEY("unknown-key"),
    BAD_SIGNATURE("bad-signature");

    private final String label;

    Verdict(String label) {
        this.label = label;
    }

    /** The reason's name in metrics and logs, the same as the Python side's. */
    public String label() {
        return label;
    }
}
