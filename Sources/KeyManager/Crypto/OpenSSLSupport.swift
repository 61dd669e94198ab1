import COpenSSL

/// A NUL-terminated C string that lives as long as the process.
///
/// OpenSSL keeps some name pointers it is given (`EVP_PKEY_CTX_new_from_name` keeps the key type,
/// `OSSL_PARAM` keeps its keys), so names passed to it must not be Swift's call-scoped temporaries.
struct OpenSSLName: @unchecked Sendable {  // the pointee is written once in init and never freed or changed
    let pointer: UnsafePointer<CChar>

    init(_ name: StaticString) {
        let storage = UnsafeMutablePointer<CChar>.allocate(capacity: name.utf8CodeUnitCount + 1)
        name.withUTF8Buffer { utf8 in
            for (index, byte) in utf8.enumerated() { storage[index] = CChar(bitPattern: byte) }
        }
        storage[name.utf8CodeUnitCount] = 0
        pointer = UnsafePointer(storage)
    }

    /// For OpenSSL parameters typed `char *` that OpenSSL only reads.
    var mutablePointer: UnsafeMutablePointer<CChar> { UnsafeMutablePointer(mutating: pointer) }
}

/// libcrypto as a short-lived process uses it.
public enum OpenSSLLibrary {
    /// The environment variables through which whoever starts keymgr could make libcrypto load code or another
    /// configuration: a config file (`OPENSSL_CONF`), the directory relative `.include`s resolve in
    /// (`OPENSSL_CONF_INCLUDE`), and the directories providers and engines are loaded from (`OPENSSL_MODULES`,
    /// `OPENSSL_ENGINES`).
    public static let untrustedEnvironment = ["OPENSSL_CONF", "OPENSSL_CONF_INCLUDE", "OPENSSL_MODULES", "OPENSSL_ENGINES"]

    /// Initialises libcrypto from the system's configuration only (`openssl.cnf` in OpenSSL's build-time
    /// directory, writable only by root in a distribution's install) and without its exit-time clean-up.
    ///
    /// A process holding the master key must never load code a less privileged user chose: `untrustedEnvironment`
    /// is removed from the process's environment (so neither libcrypto nor libcurl's TLS, nor a verifier keymgr
    /// starts, reads it) and the system file is named explicitly. FIPS or other providers are configured there, by
    /// the administrator, as the distributions do.
    ///
    /// The clean-up skipped frees every table libcrypto built (about 0.8 M instructions) just before the process's
    /// memory goes anyway. Skipping it leaves nothing readable once the process has ended: what it would have erased
    /// (the random generator's state) goes with the process's memory, core dumps are off (`ProcessHardening`), and
    /// keymgr still erases its own keys when it drops them.
    ///
    /// Call first thing in `main`, while the process has one thread (it changes the environment), before any other
    /// use of OpenSSL, in a process that exits when its work is done.
    public static func initializeWithoutCleanupAtExit() {
        for name in untrustedEnvironment { unsetenv(name) }
        let settings = OPENSSL_INIT_new()
        defer { OPENSSL_INIT_free(settings) }
        if let file = OpenSSL_version(Int32(OPENSSL_DIR)).flatMap({ systemConfigFile(versionText: String(cString: $0)) }) {
            _ = OPENSSL_INIT_set_config_filename(settings, file)
        }
        _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_LOAD_CONFIG | OPENSSL_INIT_NO_ATEXIT), settings)
    }

    /// `<OPENSSLDIR>/openssl.cnf` from `OpenSSL_version(OPENSSL_DIR)`'s text (`OPENSSLDIR: "/usr/lib/ssl"`).
    static func systemConfigFile(versionText: String) -> String? {
        guard let open = versionText.firstIndex(of: "\""), let close = versionText.lastIndex(of: "\""), open < close else {
            return nil
        }
        let directory = versionText[versionText.index(after: open)..<close]
        return directory.isEmpty ? nil : directory + "/openssl.cnf"
    }
}

/// The algorithm, parameter and curve names keymgr passes to OpenSSL.
enum OpenSSLNames {
    static let ec = OpenSSLName("EC")
    static let p256 = OpenSSLName("prime256v1")
    static let sha256 = OpenSSLName("SHA256")
    static let hkdf = OpenSSLName("HKDF")
    static let paramDigest = OpenSSLName("digest")
    static let paramKey = OpenSSLName("key")
    static let paramSalt = OpenSSLName("salt")
    static let paramInfo = OpenSSLName("info")
    static let paramGroupName = OpenSSLName("group")
    static let paramPublicKey = OpenSSLName("pub")
    static let paramPrivateKey = OpenSSLName("priv")
    static let paramECPublicX = OpenSSLName("qx")
    static let paramECPublicY = OpenSSLName("qy")
}

/// Selection flags for `EVP_PKEY_fromdata`, spelled out because Swift does not import the composite macros.
enum OpenSSLKeySelection {
    /// `EVP_PKEY_PUBLIC_KEY`: domain parameters, other parameters and the public key.
    static let publicKey: Int32 = OSSL_KEYMGMT_SELECT_ALL_PARAMETERS | OSSL_KEYMGMT_SELECT_PUBLIC_KEY
    /// `EVP_PKEY_KEYPAIR`: the public key and the private key.
    static let keyPair: Int32 = publicKey | OSSL_KEYMGMT_SELECT_PRIVATE_KEY
}

/// Builds a `.failure` error for an OpenSSL call that failed, with OpenSSL's reason (never key material), and
/// clears OpenSSL's thread-local error queue so the next operation starts clean.
func openSSLFailure(_ what: String) -> KeyManagerError {
    let code = ERR_peek_last_error()
    var reason = ""
    if code != 0 {
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        reason = " (" + String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + ")"
    }
    ERR_clear_error()
    return KeyManagerError(.failure, "\(what) failed\(reason)")
}

/// Runs `body` with a pointer to `bytes` that is never nil, even when `bytes` is empty,
/// because several OpenSSL calls reject a NULL buffer of length zero.
func withNonNullBytes<R>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>, Int) throws -> R) rethrows -> R {
    try bytes.withUnsafeBufferPointer { buffer in
        guard let base = buffer.baseAddress, !buffer.isEmpty else {
            var placeholder: UInt8 = 0
            return try body(&placeholder, 0)
        }
        return try body(base, buffer.count)
    }
}

extension OpenSSLLibrary {
    /// Makes libcrypto's one-time work of every algorithm keymgr uses, in a process that will fork workers, so each
    /// worker inherits it instead of doing it per request: the first fetch of an algorithm activates the provider
    /// and builds the library's table of algorithm names (most of a short command's time in libcrypto), and the
    /// P-256 curve's group is set up on first use.
    ///
    /// Uses no key, no secret and no random number (so no generator state is made to be copied into the workers):
    /// SHA-256 and HMAC-SHA256 of constants, HKDF of a constant, an AES-256-GCM open that fails on purpose, and an
    /// ES256 signing set-up (no signature) with the scalar 1. Call after `initializeWithoutCleanupAtExit()`.
    public static func prepareForWorkers() {
        let constant = SecretBytes([UInt8](repeating: 1, count: 32))
        _ = SHA256.hash([0])
        _ = try? HMACSHA256.authenticate([0], key: constant)
        _ = try? HKDF.deriveKey(inputKeyMaterial: constant, salt: [], info: [0], outputByteCount: 32)
        _ = try? AESGCM.open([UInt8](repeating: 0, count: 64), key: constant, aad: [])
        ERR_clear_error()
        var scalarOne = [UInt8](repeating: 0, count: P256.scalarByteCount)
        scalarOne[P256.scalarByteCount - 1] = 1
        guard let key = try? P256PrivateKey(rawRepresentation: SecretBytes(scalarOne)),
              let pkey = try? P256.makeKey(x: key.publicKey.x, y: key.publicKey.y, privateScalar: key.rawRepresentation)
        else { ERR_clear_error(); return }
        defer { EVP_PKEY_free(pkey) }
        if let context = EVP_MD_CTX_new() {
            _ = EVP_DigestSignInit_ex(context, nil, OpenSSLNames.sha256.pointer, nil, nil, pkey, nil)
            EVP_MD_CTX_free(context)
        }
        ERR_clear_error()
    }
}
