package dev.progresscontrol.kafka.streams;

import dev.progresscontrol.core.ControlMarker;
import dev.progresscontrol.core.ControlRecordValidator;
import dev.progresscontrol.core.MalformedControlHeaderException;
import dev.progresscontrol.core.Verdict;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The progress-control protocol as Kafka Streams applications see it: a control record (a
 * "tick") is an ordinary Kafka record carrying exactly one {@code progress-control} header,
 * usually keyed by a sentinel ({@value #DEFAULT_SENTINEL_KEY}) with a null value. It carries no
 * data, only progress: its timestamp promises that its writer sends nothing older to that
 * partition. Records are recognised by the header, never by key or value.
 *
 * <p>{@link #isControl(Headers)} is the check for any consumer; {@link ControlRecordValidator}
 * (in {@code progress-control-core}) adds the trust rules (timestamp skew, allowed sources, v2
 * signatures) and takes {@link #headerValues(Headers)}; {@link Controlled} holds the Kafka
 * Streams DSL helpers. See the docs page {@code docs/readers/kafka-streams.md}.
 */
public final class ProgressControl {

    /** The marker header's name. */
    public static final String HEADER = ControlMarker.HEADER;
    /** The default key of control records (as a string; on the wire, its UTF-8 bytes). */
    public static final String DEFAULT_SENTINEL_KEY = "__progress_control__";

    private ProgressControl() {
    }

    /**
     * Whether {@code headers} mark a valid control record: exactly one {@code progress-control}
     * header that parses. A record with a malformed header is not a control record (it is left
     * to the caller; {@link ControlRecordValidator} counts it as {@link Verdict#MALFORMED}).
     */
    public static boolean isControl(Headers headers) {
        try {
            return parse(headers) != null;
        } catch (MalformedControlHeaderException e) {
            return false;
        }
    }

    /** Whether {@code headers} carry a {@code progress-control} header at all, valid or not. */
    public static boolean hasControlHeader(Headers headers) {
        return headers != null && headers.lastHeader(HEADER) != null;
    }

    /**
     * The control marker in {@code headers}, {@code null} when there is none.
     *
     * @throws MalformedControlHeaderException when the header is invalid or present more than once
     */
    public static ControlMarker parse(Headers headers) {
        List<byte[]> values = headerValues(headers);
        return values.isEmpty() ? null : ControlMarker.fromHeaderValues(values);
    }

    /**
     * The values of the {@value #HEADER} headers in {@code headers}, in record order: what
     * {@link ControlRecordValidator#check} takes.
     */
    public static List<byte[]> headerValues(Headers headers) {
        List<byte[]> values = new ArrayList<>(1);
        if (headers != null) {
            for (Header header : headers.headers(HEADER)) {
                values.add(header.value());
            }
        }
        return values;
    }

    /** Whether {@code key} is the default sentinel, as a string or as its UTF-8 bytes. */
    static boolean isDefaultSentinel(Object key) {
        if (key instanceof String text) {
            return DEFAULT_SENTINEL_KEY.equals(text);
        }
        if (key instanceof byte[] bytes) {
            return java.util.Arrays.equals(bytes, DEFAULT_SENTINEL_KEY.getBytes(StandardCharsets.UTF_8));
        }
        if (key instanceof org.apache.kafka.common.utils.Bytes bytes) {
            return isDefaultSentinel(bytes.get());
        }
        return false;
    }
}
