import AgentWire
import Foundation
import Glibc
import KeyManager

/// A file an option names (`--metadata`, `--initial-access-token-file`, `--credential-file`, `audit verify --input`,
/// `--journal`, `audit archive --output`), open: the name as given, for messages, and a descriptor the command reads
/// or writes. Whoever asked opened it with their own rights, so the kernel decided (ACLs included), and the command
/// never opens the name itself in the agent:
///
/// - through the agent, the client opened it (`ArgumentScan.fileOptions`) and passed the descriptor with the request
///   (`RequestContext.files`); the worker, whose user may read more or less than its caller, uses that descriptor;
/// - run directly, keymgr opens it here, as the client would.
///
/// The commands do not branch on the mode: after `open` the file is a `NamedFile` either way.
final class NamedFile {
    /// The path as the option gave it.
    let name: String
    /// Open for reading, or (access `.create`) for writing a file made new for this command.
    let descriptor: Int32
    /// keymgr created it here (run directly): it removes it again when the command leaves it empty.
    private let createdHere: Bool

    private init(name: String, descriptor: Int32, createdHere: Bool) {
        self.name = name
        self.descriptor = descriptor
        self.createdHere = createdHere
    }

    deinit { close(descriptor) }

    /// The file `option` names at `path`, for `access`, for the caller of `request`.
    /// - Throws: `badInput` (65) saying whose rights failed ("you (uid 1001) cannot read FILE: Permission denied");
    ///   `usage` (64) for a file to create that exists, or (through the agent) a file the request did not pass.
    static func open(_ path: String, option: String, access: NamedFileAccess, for request: RequestContext) throws -> NamedFile {
        guard request.isServed else { return try openHere(path, access: access) }
        guard let passed = request.files.first(where: { $0.argument.option == option }),
              passed.argument.path == path, passed.argument.access == access else {
            throw CommandFailure(.usage, "\(option) \(path): the file did not come with the request; the agent never "
                + "opens a file by its name for you: keymgr's own client opens it and passes it (a program of your own "
                + "must pass it too, see docs/agent-protocol.md)")
        }
        let copy = fcntl(passed.descriptor, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else {
            throw CommandFailure(.failure, "cannot use the file \(path) the client passed: \(String(cString: strerror(errno)))")
        }
        let file = NamedFile(name: path, descriptor: copy, createdHere: false)
        if access == .create {
            // What the client made new for this command: a regular file, empty, open for writing.
            var info = stat()
            let flags = fcntl(copy, F_GETFL)
            guard fstat(copy, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size == 0,
                  flags >= 0, flags & O_ACCMODE != O_RDONLY else {
                throw CommandFailure(.usage, "\(option) \(path): the client passed no new, empty file open for writing")
            }
        }
        return file
    }

    /// Opened by this process, with the rights of whoever runs keymgr: as the client opens it.
    private static func openHere(_ path: String, access: NamedFileAccess) throws -> NamedFile {
        let descriptor = access == .read
            ? Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)  // a FIFO's open does not wait for a writer
            : Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0o600)
        guard descriptor >= 0 else {
            let error = errno
            let message = NamedFileArgument.refusal(path: path, access: access, uid: getuid(),
                                                    reason: String(cString: strerror(error)))
            throw error == EEXIST ? CommandFailure(.usage, message + ": name a new file") : CommandFailure(.badInput, message)
        }
        if access == .read { _ = fcntl(descriptor, F_SETFL, 0) }
        return NamedFile(name: path, descriptor: descriptor, createdHere: access == .create)
    }

    /// The most `contents()` reads by default: a document or a secret (metadata, a token, a credential).
    static let documentLimit = 1 << 20
    /// The most an audit export (`audit verify --input`, `--journal`) may be.
    static let auditExportLimit = 256 << 20

    /// The whole file, up to `limit` bytes: a caller may pass any descriptor (a pipe, `/dev/zero`), so what is read
    /// for them is bounded, not their memory's worth.
    /// - Throws: `badInput` when it cannot be read (a directory, say) or holds more than `limit` bytes.
    func contents(limit: Int = NamedFile.documentLimit) throws -> Data {
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
        var data = Data()
        do {
            while let chunk = try handle.read(upToCount: 64 << 10), !chunk.isEmpty {
                guard data.count + chunk.count <= limit else {
                    throw CommandFailure(.badInput, "\(name) holds more than \(limit >> 20) MiB: it is not the file this "
                        + "option takes")
                }
                data.append(chunk)
            }
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(.badInput, "cannot read \(name): \(error.localizedDescription)")
        }
        return data
    }

    /// The whole file as UTF-8 text (invalid sequences replaced), up to `limit` bytes.
    func text(limit: Int = NamedFile.documentLimit) throws -> String {
        String(decoding: try contents(limit: limit), as: UTF8.self)
    }

    /// A file keymgr created here that the command left empty (it failed, or had nothing to write) is removed, if
    /// the name still holds it. Through the agent the client does this once it has the answer.
    func discardIfUnused() {
        guard createdHere else { return }
        var opened = stat()
        var named = stat()
        guard fstat(descriptor, &opened) == 0, opened.st_size == 0, lstat(name, &named) == 0,
              named.st_dev == opened.st_dev, named.st_ino == opened.st_ino else { return }
        unlink(name)
    }
}
