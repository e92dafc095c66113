package dev.progresscontrol.core;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * The decoded value of a {@code progress-control} header (protocol versions 1 and 2), as
 * {@code progress_control/protocol.py} defines it. Big-endian:
 *
 * <pre>
 *   version   u8       1: unsigned, 2: signed
 *   sequence  u64      per-source sequence number
 *   id_len    u8       1..255
 *   source_id bytes    UTF-8
 *   -- version 2 and later append:
 *   kid_len   u8       1..255
 *   key_id    bytes    UTF-8
 *   mac       32 bytes HMAC-SHA256 (see {@link ControlRecordValidator})
 * </pre>
 *
 * <p>Version 1 must end after the source id, version 2 after the mac; a later version may append
 * bytes (a newer protocol's fields), which this reader ignores. Nothing here depends on a Kafka
 * client: the companions hand over the values of a record's {@value #HEADER} headers.
 *
 * @param version protocol version, 1..255
 * @param sequence the per-source sequence number, an unsigned 64-bit value held in a long
 * @param sourceId the emitting source's id
 * @param keyId version 2 and later: the id of the signing key; {@code null} for version 1
 * @param mac version 2 and later: the 32-byte signature; {@code null} for version 1
 */
public record ControlMarker(int version, long sequence, String sourceId, String keyId, byte[] mac) {

    /** The header that makes a record a control record (matched case-sensitively). */
    public static final String HEADER = "progress-control";
    /** Protocol version of unsigned markers. */
    public static final int UNSIGNED_VERSION = 1;
    /** Protocol version of signed markers. */
    public static final int SIGNED_VERSION = 2;
    /** Size of the HMAC-SHA256 signature. */
    public static final int MAC_SIZE = 32;

    private static final int PREFIX_SIZE = 1 + 8 + 1;

    /** Whether this marker carries a signature (protocol version 2 or later). */
    public boolean signed() {
        return keyId != null && mac != null;
    }

    /**
     * The marker of a record whose {@value #HEADER} headers have these values (in record order;
     * a value may be {@code null}).
     *
     * @throws MalformedControlHeaderException when there is not exactly one such header, or its
     *     value is not a valid marker
     */
    public static ControlMarker fromHeaderValues(List<byte[]> values) {
        if (values.size() != 1) {
            throw new MalformedControlHeaderException(
                    "a record must carry exactly one progress-control header, found " + values.size());
        }
        return decode(values.get(0));
    }

    /**
     * Parse one header value.
     *
     * @throws MalformedControlHeaderException when the value is not a valid marker
     */
    public static ControlMarker decode(byte[] raw) {
        if (raw == null) {
            throw new MalformedControlHeaderException("progress-control header has no value");
        }
        if (raw.length < PREFIX_SIZE) {
            throw new MalformedControlHeaderException(
                    "progress-control header too short (" + raw.length + " bytes)");
        }
        ByteBuffer buffer = ByteBuffer.wrap(raw); // big-endian
        int version = Byte.toUnsignedInt(buffer.get());
        long sequence = buffer.getLong();
        int idLength = Byte.toUnsignedInt(buffer.get());
        if (version < 1) {
            throw new MalformedControlHeaderException("unsupported progress-control version " + version);
        }
        int end = PREFIX_SIZE + idLength;
        if (idLength == 0 || raw.length < end || (version == UNSIGNED_VERSION && raw.length != end)) {
            throw new MalformedControlHeaderException(
                    "progress-control header length does not match its source id length " + idLength);
        }
        String sourceId = utf8(raw, PREFIX_SIZE, end, "source id");
        if (version < SIGNED_VERSION) {
            return new ControlMarker(version, sequence, sourceId, null, null);
        }
        int keyIdLength = raw.length > end ? Byte.toUnsignedInt(raw[end]) : 0;
        int keyIdEnd = end + 1 + keyIdLength;
        int macEnd = keyIdEnd + MAC_SIZE;
        if (keyIdLength == 0 || raw.length < macEnd || (version == SIGNED_VERSION && raw.length != macEnd)) {
            throw new MalformedControlHeaderException(
                    "progress-control v2 header: key id and signature do not match its length");
        }
        String keyId = utf8(raw, end + 1, keyIdEnd, "key id");
        return new ControlMarker(version, sequence, sourceId, keyId, Arrays.copyOfRange(raw, keyIdEnd, macEnd));
    }

    /** Strict UTF-8, as Python's {@code bytes.decode("utf-8")}: malformed input is an error. */
    private static String utf8(byte[] raw, int from, int to, String what) {
        try {
            CharBuffer chars = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(raw, from, to - from));
            return chars.toString();
        } catch (CharacterCodingException e) {
            throw new MalformedControlHeaderException("progress-control " + what + " is not UTF-8");
        }
    }

    @Override
    public String toString() {
        return "ControlMarker[version=" + version + ", sequence=" + Long.toUnsignedString(sequence)
                + ", sourceId=" + sourceId + ", keyId=" + keyId + "]";
    }
}
