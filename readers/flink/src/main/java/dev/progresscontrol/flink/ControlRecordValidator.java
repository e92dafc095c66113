package dev.progresscontrol.flink;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.EnumMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.LongSupplier;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.kafka.common.header.Headers;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Decides which control records may move time, with the Python readers' rules ({@code
 * progress_control.trust}), in their order: the header parses ({@code malformed}); the timestamp
 * is not negative ({@code negative-timestamp}) and at most the policy's skew ahead of the wall
 * clock ({@code future-timestamp}); the source is allowed ({@code source-not-allowed}); with keys,
 * the tick is signed ({@code unsigned}) by a known key ({@code unknown-key}) with a valid
 * HMAC-SHA256 over topic, partition, timestamp, sequence and source id ({@code bad-signature}).
 *
 * <p>A rejected record is skipped and counted per reason, and logged once per source and reason;
 * never fatal. Thread-safe.
 */
public final class ControlRecordValidator {
    private static final Logger LOG = LoggerFactory.getLogger(ControlRecordValidator.class);
    private static final byte[] PAYLOAD_DOMAIN =
            "progress-control/v2\0".getBytes(StandardCharsets.US_ASCII);

    /** A wall clock that survives Flink's serialization of the functions holding it. */
    public interface Clock extends LongSupplier, Serializable {}

    private final TrustPolicy policy;
    private final LongSupplier clockMs;
    private final AtomicLongArray counts = new AtomicLongArray(Verdict.values().length);
    private final Set<String> logged = ConcurrentHashMap.newKeySet();

    public ControlRecordValidator(TrustPolicy policy) {
        this(policy, System::currentTimeMillis);
    }

    /** With an injected wall clock (milliseconds), for tests. */
    public ControlRecordValidator(TrustPolicy policy, LongSupplier clockMs) {
        this.policy = policy;
        this.clockMs = clockMs;
    }

    public TrustPolicy policy() {
        return policy;
    }

    /** Decide about one record that carries a {@code progress-control} header. */
    public Verdict check(String topic, int partition, long timestampMs, Headers headers) {
        ControlMarker marker;
        try {
            marker = ControlMarker.fromHeaders(headers);
        } catch (MalformedControlHeaderException e) {
            return reject(Verdict.MALFORMED, "?", topic, partition, e.getMessage());
        }
        Verdict verdict = verdict(marker, topic, partition, timestampMs);
        counts.incrementAndGet(verdict.ordinal());
        if (verdict != Verdict.ACCEPTED) {
            logOnce(verdict, marker.sourceId(), topic, partition, "at " + timestampMs);
        }
        return verdict;
    }

    /** Records decided so far, per verdict ({@link Verdict#ACCEPTED} included). */
    public Map<Verdict, Long> counts() {
        Map<Verdict, Long> result = new EnumMap<>(Verdict.class);
        for (Verdict verdict : Verdict.values()) {
            result.put(verdict, counts.get(verdict.ordinal()));
        }
        return result;
    }

    /** How many records were decided {@code verdict} so far. */
    public long count(Verdict verdict) {
        return counts.get(verdict.ordinal());
    }

    private Verdict verdict(ControlMarker marker, String topic, int partition, long timestampMs) {
        if (timestampMs < 0) {
            return Verdict.NEGATIVE_TIMESTAMP;
        }
        if (timestampMs > clockMs.getAsLong() + policy.maxSkewMs()) {
            return Verdict.FUTURE_TIMESTAMP;
        }
        Set<String> allowed = policy.allowedSources();
        if (allowed != null && !allowed.contains(marker.sourceId())) {
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
        byte[] payload =
                signedPayload(topic, partition, timestampMs, marker.sequence(), marker.sourceId());
        if (!MessageDigest.isEqual(hmacSha256(secret, payload), marker.mac())) {
            return Verdict.BAD_SIGNATURE;
        }
        return Verdict.ACCEPTED;
    }

    /**
     * The bytes a v2 signature covers: a domain tag, then length-prefixed topic, partition (i32),
     * timestamp (i64), sequence (u64) and length-prefixed source id, big-endian.
     */
    static byte[] signedPayload(
            String topic, int partition, long timestampMs, long sequence, String sourceId) {
        byte[] topicBytes = topic.getBytes(StandardCharsets.UTF_8);
        byte[] source = sourceId.getBytes(StandardCharsets.UTF_8);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            out.write(PAYLOAD_DOMAIN);
            out.writeShort(topicBytes.length);
            out.write(topicBytes);
            out.writeInt(partition);
            out.writeLong(timestampMs);
            out.writeLong(sequence);
            out.writeByte(source.length);
            out.write(source);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }

    static byte[] hmacSha256(byte[] secret, byte[] payload) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            return mac.doFinal(payload);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is part of every Java runtime", e);
        }
    }

    private Verdict reject(Verdict verdict, String source, String topic, int partition, String why) {
        counts.incrementAndGet(verdict.ordinal());
        logOnce(verdict, source, topic, partition, why);
        return verdict;
    }

    private void logOnce(Verdict verdict, String source, String topic, int partition, String why) {
        if (logged.add(source + "\0" + verdict.label())) {
            LOG.warn(
                    "skipped a control record from source {} on {}[{}]: {} ({}); further ones "
                            + "from this source for this reason are counted, not logged",
                    source, topic, partition, verdict.label(), why);
        }
    }
}
