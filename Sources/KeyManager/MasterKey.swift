import Foundation
import Storage

/// The 32-byte root of keymgr's key hierarchy, and where it came from. Never stored in the database.
///
/// Looked for, in order: `$CREDENTIALS_DIRECTORY/keymgr.master` (systemd `LoadCredentialEncrypted=`),
/// `$KEYMGR_MASTER_KEY_FILE`, `$KEYMGR_HOME/master.tpm` (sealed to a TPM by `keymgr init --master-key tpm`),
/// `$KEYMGR_HOME/master.key` (created by `keymgr init`, mode 0600). An operator's explicit choice (systemd, the
/// environment) comes before what init left in the home.
struct MasterKey: Sendable {
    enum Source: Sendable, Equatable {
        case systemdCredential(String)
        case environmentFile(String)
        case home(String)
        /// A file in the home holding the master key sealed to a TPM (the TCTI and the TPM's blob), never the key.
        case tpmSealed(String)

        var path: String {
            switch self {
            case .systemdCredential(let path), .environmentFile(let path), .home(let path), .tpmSealed(let path): path
            }
        }

        var label: String {
            switch self {
            case .systemdCredential: "the systemd credential \(path)"
            case .environmentFile: "KEYMGR_MASTER_KEY_FILE (\(path))"
            case .home: path
            case .tpmSealed: "the TPM-sealed master key \(path)"
            }
        }

        /// Where a rotation writes the next key before it renames it into place: the same kind, `<path>.next`.
        var pending: Source {
            switch self {
            case .tpmSealed(let path): .tpmSealed(path + ".next")
            default: .home(path + ".next")
            }
        }

        var isTPMSealed: Bool { if case .tpmSealed = self { true } else { false } }
    }

    static let byteCount = 32
    static let sealedFileName = "master.tpm"
    /// The systemd credential's name (`LoadCredentialEncrypted=keymgr.master`).
    static let credentialName = "keymgr.master"
    let bytes: SecretBytes
    let source: Source
    /// The TCTI of the TPM the key is sealed to (a `.tpmSealed` source).
    var tcti: String?

    /// The source that applies in this environment (the first present), or the home file to create.
    static func source(home: StoreHome, environment: [String: String]) -> Source {
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            let path = URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent(credentialName, isDirectory: false).path
            if FileManager.default.fileExists(atPath: path) { return .systemdCredential(path) }
        }
        if let path = environment["KEYMGR_MASTER_KEY_FILE"], !path.isEmpty { return .environmentFile(path) }
        let sealed = home.url.appendingPathComponent(sealedFileName, isDirectory: false).path
        if FileManager.default.fileExists(atPath: sealed) { return .tpmSealed(sealed) }
        return .home(home.url.appendingPathComponent("master.key", isDirectory: false).path)
    }

    /// Reads the master key from `source`.
    static func load(from source: Source) throws -> MasterKey {
        let path = source.path
        var info = stat()
        guard stat(path, &info) == 0 else {
            if case .home = source {
                let sealed = ((path as NSString).deletingLastPathComponent as NSString).appendingPathComponent(sealedFileName)
                throw KeyManagerError(.config, "the master key is missing: neither \(path) nor \(sealed) (a master key "
                    + "sealed to the TPM) exists. Restore the one this store was made with from your backup, or point "
                    + "KEYMGR_MASTER_KEY_FILE at it; without it the store cannot be opened")
            }
            throw KeyManagerError(.config, "the master key is missing: \(source.label) does not exist. "
                + "Restore it from your backup, or point KEYMGR_MASTER_KEY_FILE at it; without it the store cannot be opened")
        }
        // systemd hands credentials over in a private directory; a file named by the home or KEYMGR_MASTER_KEY_FILE
        // must itself be private: nobody else may read it, except (read-only) the group keymgr itself runs as, which
        // is how a root-owned key file is shared with a `keymgr` system user (mode 0440, group keymgr).
        let fromSystemd = if case .systemdCredential = source { true } else { false }
        let readableByOurGroupOnly = info.st_gid == getegid() && info.st_mode & 0o070 == 0o040
        if !fromSystemd, info.st_mode & 0o007 != 0 || (info.st_mode & 0o070 != 0 && !readableByOurGroupOnly) {
            throw KeyManagerError(.config, "the master key \(path) is readable by other OS users "
                + "(mode \(String(info.st_mode & 0o777, radix: 8))): run `chmod 600 \(path)` and consider whether it leaked")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyManagerError(.config, "cannot read the master key \(source.label): check its owner and permissions")
        }
        if source.isTPMSealed { return try unsealed([UInt8](data), source: source) }
        guard let bytes = decode([UInt8](data)) else {
            throw KeyManagerError(.config, "\(source.label) does not hold a master key: expected 32 raw bytes, or 64 hex digits")
        }
        return MasterKey(bytes: bytes, source: source)
    }

    /// 32 raw bytes, or 64 hex digits with an optional trailing newline (as `systemd-creds` or an operator may write it).
    private static func decode(_ raw: [UInt8]) -> SecretBytes? {
        if raw.count == byteCount { return SecretBytes(raw) }
        var text = raw
        while let last = text.last, last == 10 || last == 13 || last == 32 { text.removeLast() }
        if text.count == byteCount * 2, let bytes = Hex.decode(String(decoding: text, as: UTF8.self)) {
            return SecretBytes(bytes)
        }
        return nil
    }

    /// Creates a new random master key file with mode 0600; refuses to overwrite one.
    static func create(at path: String) throws -> MasterKey {
        let bytes = try SecretBytes.random(count: byteCount)
        try writeNew(bytes, to: path)
        syncDirectory(of: path)
        return MasterKey(bytes: bytes, source: .home(path))
    }

    /// Syncs the directory holding `path`, so a file just created or renamed there survives a power loss.
    static func syncDirectory(of path: String) {
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return }
        fsync(directory)
        close(directory)
    }

    /// Writes `bytes` to a new file (O_EXCL, 0600) and syncs it to disk.
    static func writeNew(_ bytes: SecretBytes, to path: String) throws {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw KeyManagerError(.config, "cannot create the master key file \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        let written = bytes.withUnsafeBytes { buffer in write(descriptor, buffer.baseAddress, buffer.count) }
        guard written == bytes.count, fsync(descriptor) == 0 else {
            unlink(path)
            throw KeyManagerError(.config, "cannot write the master key file \(path): \(String(cString: strerror(errno)))")
        }
    }

    // MARK: Sealed to a TPM

    /// `master.tpm`: "kmtpm", a format byte, the TCTI (2-byte big-endian length, UTF-8), then the TPM's blob of the
    /// sealed-data object (see `TPMConnection.seal`). The TCTI is read before anything is verified (the device row's
    /// MAC needs the key): an edited TCTI reaches a TPM that cannot unseal the blob, and a key that is not the store's
    /// fails the device row's check value (78).
    private static let sealedMagic = Array("kmtpm".utf8) + [1]

    /// Creates a new random master key sealed to the TPM at `tcti`, written to `path` (a new file, mode 0600).
    static func createSealed(at path: String, tcti: String) throws -> MasterKey {
        let bytes = try SecretBytes.random(count: byteCount)
        try writeSealed(bytes, tcti: tcti, to: path)
        return MasterKey(bytes: bytes, source: .tpmSealed(path), tcti: tcti)
    }

    /// Seals `bytes` to the TPM at `tcti` and writes the sealed file to `path`, which must not exist: written to
    /// `<path>.tmp`, synced, then linked into place (so `path` is never seen half-written) and the directory synced.
    static func writeSealed(_ bytes: SecretBytes, tcti: String, to path: String) throws {
        let blob = try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.seal(bytes) } }
        let tctiBytes = Array(tcti.utf8)
        guard tctiBytes.count <= Int(UInt16.max) else { throw KeyManagerError(.usage, "the TCTI is too long") }
        let file = sealedMagic + [UInt8(tctiBytes.count >> 8), UInt8(tctiBytes.count & 0xFF)] + tctiBytes + blob
        let temporary = path + ".tmp"
        unlink(temporary)
        try writeNew(SecretBytes(file), to: temporary)
        defer { unlink(temporary) }
        guard link(temporary, path) == 0 else {
            throw KeyManagerError(.config, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(of: path)
    }

    /// The master key in a sealed file, unsealed by its TPM. TPM unreachable: 69 naming the TCTI; a blob this TPM
    /// does not load (another TPM's, a cleared TPM, an altered file): 78.
    private static func unsealed(_ raw: [UInt8], source: Source) throws -> MasterKey {
        let path = source.path
        let header = sealedMagic.count + 2
        guard raw.count > header, Array(raw.prefix(sealedMagic.count)) == sealedMagic else {
            throw KeyManagerError(.config, "\(path) is not a TPM-sealed master key keymgr wrote: restore it from a backup "
                + "of the home; without it the store cannot be opened")
        }
        let length = Int(raw[sealedMagic.count]) << 8 | Int(raw[sealedMagic.count + 1])
        guard raw.count > header + length,
              let tcti = String(bytes: raw[header..<(header + length)], encoding: .utf8), !tcti.isEmpty else {
            throw KeyManagerError(.config, "\(path) is damaged (its TCTI cannot be read): restore it from a backup of the home")
        }
        let blob = Array(raw[(header + length)...])
        do {
            let bytes = try TPMConnection.with(tcti: tcti) { try $0.unseal(blob) }
            guard bytes.count == byteCount else { throw TPMFailure.wontLoad(code: 0) }
            return MasterKey(bytes: bytes, source: source, tcti: tcti)
        } catch let failure as TPMFailure {
            switch failure {
            case .unreachable(_, let detail):
                throw KeyManagerError(.serverUnavailable, "no TPM answers at TCTI \(tcti) (\(detail)): this store's master "
                    + "key is sealed to that TPM (\(path)); start the TPM (or its resource manager) and try again")
            case .wontLoad:
                throw KeyManagerError(.config, "the master key sealed in \(path) does not unseal on the TPM at \(tcti): it "
                    + "was sealed by another TPM (a home copied to another machine), the TPM was cleared, or the file was "
                    + "altered; only the TPM that sealed it can open this store: restore the home on that device")
            default:
                throw TPMKeyBackend.error(failure, tcti: tcti, lockoutState: nil)
            }
        }
    }
}
