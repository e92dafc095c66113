package dev.progresscontrol.core;

/**
 * What {@link ControlRecordValidator} decided about a control record; every value but
 * {@link #ACCEPTED} is the reason it was skipped. The labels are those of
 * {@code progress_control.trust.Verdict}.
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

    /** The reason's label, as the Python consumers name it in their metrics. */
    public String label() {
        return label;
    }
}
