import Foundation
import Storage

/// The directories above a file the agent trusts (its store's home, the master key, the policy, its socket),
/// checked as OpenSSH's `safe_path` checks those above `authorized_keys`: whoever may write a directory may rename
/// an older copy, or anything else, into place below it.
///
/// Each directory from `/` down is opened with `O_NOFOLLOW` (a symbolic link is refused, so what is checked is what
/// is used) and must be owned by root or by the expected owner (the agent's user), and be writable by neither its
/// group nor others. One exception, where OpenSSH has none: a directory owned by root with the sticky bit (`/tmp`),
/// where others may add names but may not rename or remove one they do not own, so a directory of ours in it stays
/// ours.
public enum SafePath {
    /// O_PATH (Linux), which Swift's Glibc module does not export: a descriptor that only names the file.
    private static let openPath: Int32 = 0o10000000

    /// Checks every directory above `path` (not `path` itself).
    ///
    /// - Parameter what: what `path` is, for the message ("the agent's policy").
    /// - Throws: `config` naming the directory, its owner or mode, and what to do.
    public static func checkDirectories(above path: String, owner: UInt32, what: String) throws {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let components = URL(fileURLWithPath: absolute).standardized.pathComponents.filter { $0 != "/" }
        var directory = open("/", openPath | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else {
            throw KeyManagerError(.config, "cannot open / to check the directories above \(what) \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(directory) }
        var walked = "/"
        try check(directory, walked, above: path, owner: owner, what: what)
        for component in components.dropLast() {
            walked = walked == "/" ? "/" + component : walked + "/" + component
            let next = openat(directory, component, openPath | O_NOFOLLOW | O_CLOEXEC)
            guard next >= 0 else {
                throw KeyManagerError(.config, "cannot open \(walked), above \(what) \(path): \(String(cString: strerror(errno))): check the path")
            }
            close(directory)
            directory = next
            try check(directory, walked, above: path, owner: owner, what: what)
        }
    }

    /// Checks the directories above the store's home and above the master key's file (wherever it comes from).
    public static func checkStore(home: StoreLocation, environment: [String: String], owner: UInt32) throws {
        try checkDirectories(above: home.url.path, owner: owner, what: "the store's home")
        let key = MasterKey.source(home: home.home, environment: environment)
        try checkDirectories(above: key.path, owner: owner, what: "the master key")
    }

    private static func check(_ descriptor: Int32, _ directory: String, above path: String, owner: UInt32,
                              what: String) throws {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw KeyManagerError(.config, "cannot check \(directory), above \(what) \(path): \(String(cString: strerror(errno)))")
        }
        switch info.st_mode & S_IFMT {
        case S_IFDIR: break
        case S_IFLNK:
            throw KeyManagerError(.config, "\(directory), above \(what) \(path), is a symbolic link, which is not "
                + "followed: name \(what) by a path without symbolic links")
        default:
            throw KeyManagerError(.config, "\(directory), above \(what) \(path), is not a directory: check the path")
        }
        let mode = String(info.st_mode & 0o7777, radix: 8)
        guard info.st_uid == 0 || info.st_uid == owner else {
            throw KeyManagerError(.config, "the directory \(directory), above \(what) \(path), is owned by uid "
                + "\(info.st_uid), who could replace what it holds: only root or uid \(owner) (the agent's user) may "
                + "own it: chown root \(directory), or move \(what) elsewhere")
        }
        let sharedButSticky = info.st_uid == 0 && info.st_mode & S_ISVTX != 0
        guard info.st_mode & (S_IWGRP | S_IWOTH) == 0 || sharedButSticky else {
            throw KeyManagerError(.config, "the directory \(directory), above \(what) \(path), can be written by "
                + "other OS users (mode \(mode)), who could replace what it holds: chmod go-w \(directory), or move "
                + "\(what) elsewhere")
        }
    }
}
