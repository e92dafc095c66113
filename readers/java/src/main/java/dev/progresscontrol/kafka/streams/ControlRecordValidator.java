package dev.progresscontrol.kafka.streams;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.EnumMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.kafka.common.header.Headers;
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
 * <p>Thread-safe. Rejections are counted per reason and logged once per source and reason.
 */
public final class ControlRecordValidator {

    private static final Logger LOG = LoggerFactory.getLogger(ControlRecordValidator.class);
    private static final byte[] PAYLOAD_DOMAIN = "progress-control/v2\0".getBytes(StandardCharsets.UTF_8);
    private static final String HMAC = "HmacSHA256";

    private final TrustPolicy policy;
    private final LongSupplier clockMs;
    private final Map<Verdict, AtomicLong> rejected = new EnumMap<>(Verdict.class);
    private final Set<String> logged = ConcurrentHashMap.newKeySet();

    public ControlRecordValidator(TrustPolicy policy) {
        this(policy, System::currentTimeMillis);
    }

    /** A validator with an injected wall clock (milliseconds since the epoch), for tests. */
    public ControlRecordValidator(TrustPolicy policy, LongSupplier clockMs) {
        this.policy = policy;
        this.clockMs = clockMs;
        for (Verdict verdict : Verdict.values()) {
            rejected.put(verdict, new AtomicLong());
        }
    }

    public TrustPolicy policy() {
        return policy;
    }

    /** Rejected records so far for {@code reason}. */
    public long rejected(Verdict reason) {
        return rejected.get(reason).get();
    }

    /** Decide about one record carrying the {@code progress-control} header. */
    public Verdict check(String topic, int partition, long timestampMs, Headers headers) {
        ControlMarker marker;
        try {
            marker = ProgressControl.parse(headers);
        } catch (MalformedControlHeaderException e) {
            return reject(Verdict.MALFORMED, "?", topic, partition, e.getMessage());
        }
        if (marker == null) {
            return reject(Verdict.MALFORMED, "?", topic, partition, "no control header");
        }
        Verdict verdict = verdict(marker, topic, partition, timestampMs);
        if (verdict == Verdict.ACCEPTED) {
            return verdict;
        }
        return reject(verdict, marker.sourceId(), topic, partition, "at " + timestampMs);
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
        byte[] expected = mac(secret, signedPayload(topic, partition, timestampMs, marker.sequence(), marker.sourceId()));
        return MessageDigest.isEqual(expected, marker.mac()) ? Verdict.ACCEPTED : Verdict.BAD_SIGNATURE;
    }

    private Verdict reject(Verdict verdict, String source, String topic, int partition, String detail) {
        rejected.get(verdict).incrementAndGet();
        if (logged.add(source + "\0" + verdict.label())) {
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
    public static byte[] mac(byte[] secret, byte[] payload) {
        try {
            Mac hmac = Mac.getInstance(HMAC);
            hmac.init(new SecretKeySpec(secret, HMAC));
            return hmac.doFinal(payload);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is unavailable", e);
        }
    }
}
