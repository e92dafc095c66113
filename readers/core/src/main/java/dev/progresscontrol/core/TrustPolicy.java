package dev.progresscontrol.core;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * What a consumer accepts as a control record, as {@code progress_control.trust.TrustPolicy}:
 * a maximum skew ahead of the local wall clock, optionally verification keys (key id to secret;
 * when set, only records signed by one of them are accepted) and optionally allowed source ids.
 *
 * <p>From application configs ({@link #fromConfigs(Map)}): {@value #MAX_SKEW_MS_CONFIG},
 * {@value #VERIFICATION_KEYS_CONFIG} ({@code "id1:secret1,id2:secret2"}, secrets as UTF-8, each
 * at least 16 bytes) and {@value #ALLOWED_SOURCES_CONFIG} (comma-separated). In code:
 * {@code TrustPolicy.defaults().withMaxSkew(...).withVerificationKeys("k1:...")}; the
 * {@code with...} methods return a changed copy. Serializable, so Flink functions can hold one.
 *
 * @param maxSkewMs how far ahead of the local wall clock a control record's timestamp may be
 * @param verificationKeys key id to secret; empty: signatures are not required
 * @param allowedSources accepted source ids; {@code null}: any source
 */
public record TrustPolicy(long maxSkewMs, Map<String, byte[]> verificationKeys, Set<String> allowedSources)
        implements Serializable {

    private static final long serialVersionUID = 1L;

    /** Default skew: five minutes, as the Python consumers. */
    public static final long DEFAULT_MAX_SKEW_MS = 300_000L;
    public static final String MAX_SKEW_MS_CONFIG = "progress.control.max.skew.ms";
    public static final String VERIFICATION_KEYS_CONFIG = "progress.control.verification.keys";
    public static final String ALLOWED_SOURCES_CONFIG = "progress.control.allowed.sources";

    private static final int MIN_SECRET_BYTES = 16;

    public TrustPolicy {
        if (maxSkewMs < 0) {
            throw new IllegalArgumentException("maxSkewMs must be >= 0, got " + maxSkewMs);
        }
        verificationKeys = Collections.unmodifiableMap(new LinkedHashMap<>(verificationKeys));
        allowedSources = allowedSources == null || allowedSources.isEmpty() ? null : Set.copyOf(allowedSources);
    }

    /** The default policy: any well-formed control record within the default skew. */
    public static TrustPolicy defaults() {
        return new TrustPolicy(DEFAULT_MAX_SKEW_MS, Map.of(), null);
    }

    /** The policy the {@code progress.control.*} entries of {@code configs} describe. */
    public static TrustPolicy fromConfigs(Map<String, ?> configs) {
        Object skew = configs.get(MAX_SKEW_MS_CONFIG);
        Object keys = configs.get(VERIFICATION_KEYS_CONFIG);
        Object sources = configs.get(ALLOWED_SOURCES_CONFIG);
        return new TrustPolicy(
                skew == null ? DEFAULT_MAX_SKEW_MS : Long.parseLong(skew.toString().trim()),
                keys == null ? Map.of() : parseKeys(keys.toString()),
                sources == null ? null : parseSources(sources.toString()));
    }

    /** Keys from their settings form {@code "id1:secret1,id2:secret2"} (as Python's {@code parse_keys}). */
    public static Map<String, byte[]> parseKeys(String spec) {
        Map<String, byte[]> keys = new LinkedHashMap<>();
        for (String part : spec.split(",")) {
            String item = part.strip();
            if (item.isEmpty()) {
                continue;
            }
            int colon = item.indexOf(':');
            if (colon <= 0 || colon == item.length() - 1) {
                throw new IllegalArgumentException("keys are written as id:secret, separated by commas");
            }
            String keyId = item.substring(0, colon);
            keys.put(keyId, checkedKey(keyId, item.substring(colon + 1).getBytes(StandardCharsets.UTF_8)));
        }
        return keys;
    }

    /** How far ahead of the local wall clock a control record's timestamp may be. */
    public TrustPolicy withMaxSkew(Duration maxSkew) {
        return new TrustPolicy(maxSkew.toMillis(), verificationKeys, allowedSources);
    }

    /** Accept only control records signed by this key (or another one added the same way). */
    public TrustPolicy withVerificationKey(String keyId, byte[] secret) {
        Map<String, byte[]> keys = new LinkedHashMap<>(verificationKeys);
        keys.put(keyId, checkedKey(keyId, Arrays.copyOf(secret, secret.length)));
        return new TrustPolicy(maxSkewMs, keys, allowedSources);
    }

    /** {@link #withVerificationKey} for every key of the settings form {@code "id1:secret1,id2:secret2"}. */
    public TrustPolicy withVerificationKeys(String spec) {
        Map<String, byte[]> keys = new LinkedHashMap<>(verificationKeys);
        keys.putAll(parseKeys(spec));
        return new TrustPolicy(maxSkewMs, keys, allowedSources);
    }

    /** Accept only control records from these source ids (none given: any source). */
    public TrustPolicy withAllowedSources(String... sourceIds) {
        Set<String> sources = new LinkedHashSet<>();
        for (String id : sourceIds) {
            if (!id.isBlank()) {
                sources.add(id.strip());
            }
        }
        return new TrustPolicy(maxSkewMs, verificationKeys, sources);
    }

    private static byte[] checkedKey(String keyId, byte[] secret) {
        int idBytes = keyId.getBytes(StandardCharsets.UTF_8).length;
        if (idBytes < 1 || idBytes > 255) {
            throw new IllegalArgumentException("a key id must be 1..255 bytes of UTF-8: " + keyId);
        }
        if (secret.length < MIN_SECRET_BYTES) {
            throw new IllegalArgumentException("the secret of key " + keyId + " must be at least 16 bytes");
        }
        return secret;
    }

    private static Set<String> parseSources(String spec) {
        Set<String> found = Arrays.stream(spec.split(","))
                .map(String::strip)
                .filter(s -> !s.isEmpty())
                .collect(Collectors.toSet());
        return found.isEmpty() ? null : found;
    }

    @Override
    public String toString() { // never the secrets
        return "TrustPolicy[maxSkewMs=" + maxSkewMs + ", keyIds=" + verificationKeys.keySet()
                + ", allowedSources=" + allowedSources + "]";
    }
}
