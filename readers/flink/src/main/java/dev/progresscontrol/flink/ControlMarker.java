package dev.progresscontrol.flink;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The decoded value of a {@code progress-control} header (the protocol is described in
 * docs/readers/flink.md and, for the Python side, {@code progress_control.protocol}).
 *
 * <p>Big-endian: {@code version u8, sequence u64, id_len u8, source_id}; version 2 appends {@code
 * kid_len u8, key_id, mac (32 bytes)}. Version 1 and 2 headers must end exactly there; later
 * versions keep this prefix and may append fields, which are ignored.
 *
 * @param version protocol version (1: unsigned, 2 and later: signed)
 * @param sequence per-source sequence number, an unsigned 64-bit value held in a {@code long}
 * @param sourceId the emitting source's id
 * @param keyId the signing key's id (version 2 and later), else {@code null}
 * @param mac the HMAC-SHA256 signature (version 2 and later), else {@code null}
 */
public record ControlMarker(int version, long sequence, String sourceId, String keyId, byte[] mac) {
    /** The header that makes a record a control record. */
    public static final String HEADER = "progress-control";

    static final int SIGNED_VERSION = 2;
    static final int MAC_SIZE = 32;
    private static final int PREFIX_SIZE = 1 + 8 + 1;

    /** Whether the marker carries a signature (protocol version 2 and later). */
    public boolean signed() {
        return keyId != null && mac != null;
    }

    /** Whether {@code headers} carry a {@code progress-control} header at all, valid or not. */
    public static boolean isPresent(Headers headers) {
        return headers != null && headers.lastHeader(HEADER) != null;
    }

    /**
     * The marker in {@code headers}; throws when the header is absent, present more than once, or
     * malformed (call {@link #isPresent} first to tell data from control records).
     */
    public static ControlMarker fromHeaders(Headers headers) throws MalformedControlHeaderException {
        byte[] value = null;
        int found = 0;
        for (Header header : headers.headers(HEADER)) {
            value = header.value();
            found++;
        }
        if (found != 1) {
            throw new MalformedControlHeaderException(
                    "a record must carry exactly one progress-control header, found " + found);
        }
        return decode(value);
    }

    /** Parse one header value. */
    public static ControlMarker decode(byte[] raw) throws MalformedControlHeaderException {
        if (raw == null) {
            throw new MalformedControlHeaderException("progress-control header has no value");
        }
        if (raw.length < PREFIX_SIZE + 1) {
            throw new MalformedControlHeaderException(
                    "progress-control header too short (" + raw.length + " bytes)");
        }
        ByteBuffer buffer = ByteBuffer.wrap(raw);
        int version = Byte.toUnsignedInt(buffer.get());
        long sequence = buffer.getLong();
        int idLength = Byte.toUnsignedInt(buffer.get());
        if (version < 1) {
            throw new MalformedControlHeaderException("unsupported progress-control version 0");
        }
        int end = PREFIX_SIZE + idLength;
        if (idLength == 0 || raw.length < end || (version == 1 && raw.length != end)) {
            throw new MalformedControlHeaderException(
                    "progress-control header length does not match its source id length " + idLength);
        }
        String sourceId = utf8(raw, PREFIX_SIZE, idLength, "source id");
        if (version < SIGNED_VERSION) {
            return new ControlMarker(version, sequence, sourceId, null, null);
        }
        int keyIdLength = raw.length > end ? Byte.toUnsignedInt(raw[end]) : 0;
        int keyIdEnd = end + 1 + keyIdLength;
        int macEnd = keyIdEnd + MAC_SIZE;
        if (keyIdLength == 0
                || raw.length < macEnd
                || (version == SIGNED_VERSION && raw.length != macEnd)) {
            throw new MalformedControlHeaderException(
                    "progress-control v2 header: key id and signature do not match its length");
        }
        String keyId = utf8(raw, end + 1, keyIdLength, "key id");
        return new ControlMarker(
                version, sequence, sourceId, keyId, Arrays.copyOfRange(raw, keyIdEnd, macEnd));
    }

    /** Strict UTF-8, as the Python side decodes: invalid bytes make the header malformed. */
    private static String utf8(byte[] raw, int offset, int length, String what)
            throws MalformedControlHeaderException {
        try {
            CharBuffer chars = StandardCharsets.UTF_8
                    .newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(raw, offset, length));
            return chars.toString();
        } catch (CharacterCodingException e) {
            throw new MalformedControlHeaderException("progress-control " + what + " is not UTF-8");
        }
    }
}
