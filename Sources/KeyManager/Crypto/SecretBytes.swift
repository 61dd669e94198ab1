import COpenSSL

/// Secret bytes (keys, PINs, tokens): never printed, zeroed when released, compared in constant time.
///
/// The bytes live in one heap buffer owned by a private class that overwrites them with `OPENSSL_cleanse`
/// when the last copy of the value goes away. Copies of a `SecretBytes` share that buffer, which is never
/// changed after it is filled. `description`, `debugDescription`, string interpolation and `dump` show only
/// the length.
public struct SecretBytes: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    private let storage: SecretStorage

    /// Copies `bytes` into a new secret buffer. The caller's array is not erased; prefer producing secrets
    /// directly into `SecretBytes` where that is possible.
    public init(_ bytes: [UInt8]) {
        storage = SecretStorage(count: bytes.count)
        if !bytes.isEmpty {
            bytes.withUnsafeBytes { storage.buffer.copyMemory(from: $0) }
        }
    }

    /// The UTF-8 encoding of `string`, as a secret (for a PIN or a token read from a prompt or a server).
    public init(utf8 string: String) {
        self.init(Array(string.utf8))
    }

    /// A buffer of `count` zero bytes that `body` fills in place, so a secret produced by a C library
    /// never passes through an ordinary array. If `body` throws, the buffer is erased and released.
    init(count: Int, initializingWith body: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        storage = SecretStorage(count: count)
        try body(storage.buffer)
    }

    /// `count` bytes from the operating system's CSPRNG (OpenSSL `RAND_bytes`).
    public static func random(count: Int) throws -> SecretBytes {
        guard count >= 0 else { throw KeyManagerError(.failure, "cannot draw a negative number of random bytes") }
        return try SecretBytes(count: count) { buffer in
            try SecureRandom.fill(buffer)
        }
    }

    /// The number of bytes.
    public var count: Int { storage.buffer.count }

    /// Calls `body` with a read-only view of the bytes. The pointer must not escape `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(storage.buffer))
    }

    /// A copy of the bytes in an ordinary array, for crypto internals and tests only: the array is not
    /// erased when released, so prefer `withUnsafeBytes`.
    public var bytes: [UInt8] {
        withUnsafeBytes { Array($0) }
    }

    /// The concatenation `lhs || rhs`, itself secret.
    public static func + (lhs: SecretBytes, rhs: SecretBytes) -> SecretBytes {
        SecretBytes(count: lhs.count + rhs.count) { buffer in
            lhs.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: buffer[0..<lhs.count]).copyMemory(from: $0) }
            rhs.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: buffer[lhs.count...]).copyMemory(from: $0) }
        }
    }

    /// Equal lengths and equal contents, compared in constant time for a given length (`CRYPTO_memcmp`).
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.count == 0 { return true }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in
                guard let a = left.baseAddress, let b = right.baseAddress else { return false }
                return CRYPTO_memcmp(a, b, left.count) == 0
            }
        }
    }

    /// `SecretBytes(<redacted N bytes>)`: the length only, never the content.
    public var description: String { "SecretBytes(<redacted \(count) bytes>)" }

    /// The same as `description`: the length only, never the content.
    public var debugDescription: String { description }

    /// A mirror without children, so `dump` and debuggers show nothing but the description.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

/// Compares two byte arrays in constant time for a given length (`CRYPTO_memcmp`); arrays of different
/// lengths are unequal (the length itself is not secret).
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { left in
        b.withUnsafeBytes { right in
            guard let l = left.baseAddress, let r = right.baseAddress else { return false }
            return CRYPTO_memcmp(l, r, left.count) == 0
        }
    }
}

/// The heap buffer behind `SecretBytes`: filled once while its owning value is initialised, then only read;
/// erased with `OPENSSL_cleanse` and freed when the last `SecretBytes` sharing it is released.
private final class SecretStorage: @unchecked Sendable {  // no mutation after initialisation, see above
    private let base: UnsafeMutableRawPointer
    private let count: Int

    init(count: Int) {
        self.count = Swift.max(count, 0)
        // At least one byte, so the base address is never nil, even for an empty secret.
        base = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(self.count, 1), alignment: 16)
        base.initializeMemory(as: UInt8.self, repeating: 0, count: Swift.max(self.count, 1))
    }

    var buffer: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: base, count: count) }

    deinit {
        OPENSSL_cleanse(base, Swift.max(count, 1))
        base.deallocate()
    }
}
