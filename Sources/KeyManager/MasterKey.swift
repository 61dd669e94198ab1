import Foundation
import Storage

/// The 32-byte root of keymgr's key hierarchy, and where it came from. Never stored in the database.
///
/// Looked for, in order: `$CREDENTIALS_DIRECTORY/keymgr.master` (systemd `LoadCredentialEncrypted=`),
/// `$KEYMGR_MASTER_KEY_FILE`, `$KEYMGR_HOME/master.key` (created by `keymgr init`, mode 0600).
struct MasterKey: Sendable {
    enum Source: Sendable, Equatable {
        case systemdCredential(String)
        case environmentFile(String)
        case home(String)

        var path: String {
            switch self {
            case .systemdCredential(let path), .environmentFile(let path), .home(let path): path
            }
        }

        var label: String {
            switch self {
            case .systemdCredential: "the systemd credential \(path)"
            case .environmentFile: "KEYMGR_MASTER_KEY_FILE (\(path))"
            case .home: path
            }
        }
    }

    static let byteCount = 32
    let bytes: SecretBytes
    let source: Source

    /// The source that applies in this environment (the first present), or the home file to create.
    static func source(home: StoreHome, environment: [String: String]) -> Source {
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            let path = URL(fileURLWithPath: directory).appendingPathComponent("keymgr.master").path
            if FileManager.default.fileExists(atPath: path) { return .systemdCredential(path) }
        }
        if let path = environment["KEYMGR_MASTER_KEY_FILE"], !path.isEmpty { return .environmentFile(path) }
        return .home(home.url.appendingPathComponent("master.key").path)
    }

    /// Reads the master key from `source`.
    static func load(from source: Source) throws -> MasterKey {
        let path = source.path
        var info = stat()
        guard stat(path, &info) == 0 else {
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
}
