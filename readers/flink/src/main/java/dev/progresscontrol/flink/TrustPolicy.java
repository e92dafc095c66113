package dev.progresscontrol.flink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;

/**
 * What a reader accepts as a control record (the Python side's {@code TrustPolicy}): how far
 * ahead of the local wall clock a tick may be, the keys a tick must be signed with (none: any
 * well-formed tick), and the source ids accepted (none: any). Immutable; the {@code with...}
 * methods return a changed copy.
 */
public final class TrustPolicy implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Five minutes, as the Python readers' default. */
    public static final long DEFAULT_MAX_SKEW_MS = 300_000L;

    private static final int MIN_SECRET_BYTES = 16;

    private final long maxSkewMs;
    private final Map<String, byte[]> verificationKeys;
    private final Set<String> allowedSources;

    private TrustPolicy(long maxSkewMs, Map<String, byte[]> keys, Set<String> sources) {
        if (maxSkewMs < 0) {
            throw new IllegalArgumentException("maxSkew must be >= 0, got " + maxSkewMs + " ms");
        }
        this.maxSkewMs = maxSkewMs;
        this.verificationKeys = Collections.unmodifiableMap(keys);
        this.allowedSources = sources == null ? null : Collections.unmodifiableSet(sources);
    }

    /** Any well-formed tick from any source, at most five minutes ahead of the wall clock. */
    public static TrustPolicy defaults() {
        return new TrustPolicy(DEFAULT_MAX_SKEW_MS, new LinkedHashMap<>(), null);
    }

    /** How far ahead of the local wall clock a tick's timestamp may be. */
    public TrustPolicy withMaxSkew(Duration maxSkew) {
        return new TrustPolicy(maxSkew.toMillis(), verificationKeys, allowedSources);
    }

    /** Accept only ticks signed by this key (or another one added the same way). */
    public TrustPolicy withVerificationKey(String keyId, byte[] secret) {
        int idBytes = keyId.getBytes(StandardCharsets.UTF_8).length;
        if (idBytes < 1 || idBytes > 255) {
            throw new IllegalArgumentException("a key id must be 1..255 bytes of UTF-8: " + keyId);
        }
        if (secret.length < MIN_SECRET_BYTES) {
            throw new IllegalArgumentException(
                    "the secret of key " + keyId + " must be at least 16 bytes");
        }
        Map<String, byte[]> keys = new LinkedHashMap<>(verificationKeys);
        keys.put(keyId, Arrays.copyOf(secret, secret.length));
        return new TrustPolicy(maxSkewMs, keys, allowedSources);
    }

    /**
     * Keys in their settings form, {@code "id1:secret1,id2:secret2"} (secrets as UTF-8), the form
     * the interceptor, sidecar and runtime take.
     */
    public TrustPolicy withVerificationKeys(String spec) {
        TrustPolicy policy = this;
        for (String item : spec.split(",")) {
            String trimmed = item.trim();
            if (trimmed.isEmpty()) {
                continue;
            }
            int colon = trimmed.indexOf(':');
            if (colon <= 0 || colon == trimmed.length() - 1) {
                throw new IllegalArgumentException(
                        "keys are written as id:secret, separated by commas");
            }
            policy = policy.withVerificationKey(
                    trimmed.substring(0, colon),
                    trimmed.substring(colon + 1).getBytes(StandardCharsets.UTF_8));
        }
        return policy;
    }

    /** Accept only ticks from these source ids (none given: any source). */
    public TrustPolicy withAllowedSources(String... sourceIds) {
        Set<String> sources = new LinkedHashSet<>();
        for (String id : sourceIds) {
            if (!id.isBlank()) {
                sources.add(id.trim());
            }
        }
        return new TrustPolicy(maxSkewMs, verificationKeys, sources.isEmpty() ? null : sources);
    }

    public long maxSkewMs() {
        return maxSkewMs;
    }

    /** Key id to secret; empty when ticks need no signature. */
    public Map<String, byte[]> verificationKeys() {
        return verificationKeys;
    }

    /** The accepted source ids, or {@code null} for any. */
    public Set<String> allowedSources() {
        return allowedSources;
    }

    @Override
    public String toString() {
        return "TrustPolicy{maxSkewMs=" + maxSkewMs + ", keyIds=" + verificationKeys.keySet()
                + ", allowedSources=" + allowedSources + "}";
    }
}
