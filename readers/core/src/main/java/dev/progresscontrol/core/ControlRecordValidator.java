package dev.progresscontrol.core;

import java.io.ByteArrayOutputStream;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.LongSupplier;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Which control records may move time, as {@code progress_control.trust.ControlRecordValidator}
 * decides it (the same checks, in the same order, with the same signature):
 *
 * <ol>
 *   <li>the header parses (exactly one, well-formed), else {@link Verdict#MALFORMED};
 *   <li>the timestamp is not negative, else {@link Verdict#NEGATIVE_TIMESTAMP};
 *   <li>it is at most {@code maxSkewMs} ahead of the local wall clock, else
 *       {@link Verdict#FUTURE_TIMESTAMP};
 *   <li>the source id is allowed (when a list is set), else {@link Verdict#SOURCE_NOT_ALLOWED};
 *   <li>when verification keys are set: signed (v2, else {@link Verdict#UNSIGNED}) by a known
 *       key (else {@link Verdict#UNKNOWN_KEY}) with a valid HMAC-SHA256 over topic, partition,
 *       timestamp, sequence and source id (else {@link Verdict#BAD_SIGNATURE}).
 * </ol>
 *
 * <p>It takes what any Kafka client gives: topic, partition, timestamp and the values of the
 * record's {@value ControlMarker#HEADER} headers. Thread-safe. Every decision is counted per
 * verdict; rejections are logged once per source and reason, never fatal.
 */
public final class ControlRecordValidator {

    private static final Logger LOG = LoggerFactory.getLogger(ControlRecordValidator.class);
    private static final byte[] PAYLOAD_DOMAIN = "progress-control/v2\0".getBytes(StandardCharsets.UTF_8);
    private static final String HMAC = "HmacSHA256";

    /** A wall clock in milliseconds that can be serialized with what holds it (Flink functions). */
    public interface Clock extends LongSupplier, Serializable {}

    private final TrustPolicy policy;
    private final LongSupplier clockMs;
    private final AtomicLongArray counts = new AtomicLongArray(Verdict.values().length);
    private final Set<String> logged = ConcurrentHashMap.newKeySet();

    public ControlRecordValidator(TrustPolicy policy) {
        this(policy, System::currentTimeMillis);
    }

    /** A validator with an injected wall clock (milliseconds since the epoch), for tests. */
    public ControlRecordValidator(TrustPolicy policy, LongSupplier clockMs) {
        this.policy = policy;
        this.clockMs = clockMs;
    }

    public TrustPolicy policy() {
        return policy;
    }

    /** How many records were decided {@code verdict} so far ({@link Verdict#ACCEPTED} included). */
    public long count(Verdict verdict) {
        return counts.get(verdict.ordinal());
    }

    /** Records decided so far, per verdict. */
    public Map<Verdict, Long> counts() {
        Map<Verdict, Long> result = new EnumMap<>(Verdict.class);
        for (Verdict verdict : Verdict.values()) {
            result.put(verdict, count(verdict));
        }
        return result;
    }

    /**
     * Decide about one record.
     *
     * @param headerValues the values of the record's {@value ControlMarker#HEADER} headers, in
     *     record order (anything but exactly one valid value is {@link Verdict#MALFORMED})
     */
    public Verdict check(String topic, int partition, long timestampMs, List<byte[]> headerValues) {
        ControlMarker marker;
        try {
            marker = ControlMarker.fromHeaderValues(headerValues);
        } catch (MalformedControlHeaderException e) {
            return decided(Verdict.MALFORMED, "?", topic, partition, e.getMessage());
        }
        Verdict verdict = verdict(marker, topic, partition, timestampMs);
        return decided(verdict, marker.sourceId(), topic, partition, "at " + timestampMs);
    }

    private Verdict verdict(ControlMarker marker, String topic, int partition, long timestampMs) {
        if (timestampMs < 0) {
            return Verdict.NEGATIVE_TIMESTAMP;
        }
        if (timestampMs > clockMs.getAsLong() + policy.maxSkewMs()) {
            return Verdict.FUTURE_TIMESTAMP;
        }
        if (policy.allowedSources() != null && !policy.allowedSources().contains(marker.sourceId())) {
            return Verdict.SOURCE_NOT_ALLOWED;
        }
        if (policy.verificationKeys().isEmpty()) {
            return Verdict.ACCEPTED;
        }
        if (!marker.signed()) {
            return Verdict.UNSIGNED;
        }
        byte[] secret = policy.verificationKeys().get(marker.keyId());
        if (secret == null) {
            return Verdict.UNKNOWN_KEY;
        }
        byte[] expected = hmacSha256(secret,
                signedPayload(topic, partition, timestampMs, marker.sequence(), marker.sourceId()));
        return MessageDigest.isEqual(expected, marker.mac()) ? Verdict.ACCEPTED : Verdict.BAD_SIGNATURE;
    }

    private Verdict decided(Verdict verdict, String source, String topic, int partition, String detail) {
        counts.incrementAndGet(verdict.ordinal());
        if (verdict != Verdict.ACCEPTED && logged.add(source + "\0" + verdict.label())) {
            LOG.warn("skipped a control record from source {} on {}[{}]: {} ({}); further ones from this "
                    + "source for this reason are counted, not logged", source, topic, partition, verdict.label(), detail);
        }
        return verdict;
    }

    /**
     * The bytes a v2 signature covers: a domain tag, then length-prefixed topic, partition (i32),
     * timestamp (i64), sequence (u64) and length-prefixed source id, big-endian (Python's
     * {@code signed_payload}).
     */
    public static byte[] signedPayload(String topic, int partition, long timestampMs, long sequence, String sourceId) {
        byte[] topicBytes = topic.getBytes(StandardCharsets.UTF_8);
        byte[] source = sourceId.getBytes(StandardCharsets.UTF_8);
        if (topicBytes.length > 0xFFFF || source.length > 0xFF) {
            throw new IllegalArgumentException("topic or source id too long to sign");
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.writeBytes(PAYLOAD_DOMAIN);
        out.writeBytes(ByteBuffer.allocate(2).putShort((short) topicBytes.length).array());
        out.writeBytes(topicBytes);
        out.writeBytes(ByteBuffer.allocate(4 + 8 + 8 + 1)
                .putInt(partition).putLong(timestampMs).putLong(sequence).put((byte) source.length).array());
        out.writeBytes(source);
        return out.toByteArray();
    }

    /** HMAC-SHA256 of {@code payload} with {@code secret}. */
    public static byte[] hmacSha256(byte[] secret, byte[] payload) {
        try {
            Mac hmac = Mac.getInstance(HMAC);
            hmac.init(new SecretKeySpec(secret, HMAC));
            return hmac.doFinal(payload);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is part of every Java runtime", e);
        }
    }
}
