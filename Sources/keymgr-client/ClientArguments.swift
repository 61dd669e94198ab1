import AgentWire
import Glibc

/// What the client needs to know about its command line, read with AgentWire's `ArgumentScan` (the one scanner the
/// worker uses too), without an argument parser: the options that choose the mode, the descriptors and files the
/// command will read, and whether errors are wanted in JSON. Only arguments before `--` count; the full parser (in
/// the agent or keymgr-core) reads the command line again, whole.
struct ClientArguments {
    /// The arguments as given, without the program name.
    let all: [String]
    /// `--socket PATH` / `--socket=PATH`.
    private(set) var socket: String?
    /// `--home DIR` / `--home=DIR`.
    private(set) var home: String?
    /// `--json`.
    let json: Bool
    /// The first argument that is no option nor an option's value: the subcommand.
    let subcommand: String?
    /// The descriptor numbers named by `--pin-fd` / `--password-fd`, in order, without repeats.
    private(set) var namedDescriptors: [Int32] = []
    /// The files the command's options name, which the client opens with the caller's rights (agent mode).
    let namedFiles: [NamedFileArgument]
    /// A mistake the client itself must report (usage, 64).
    private(set) var failure: ClientFailure?

    init(_ arguments: some Sequence<String>) {
        all = Array(arguments)
        let scan = ArgumentScan(all)
        json = scan.has("--json")
        subcommand = scan.subcommand
        namedFiles = scan.namedFiles
        for element in scan.elements {
            guard case .option(let name, let value, _) = element else { continue }
            switch name {
            case "--socket":
                guard let value, !value.isEmpty else {
                    failure = failure ?? ClientFailure(code: "usage", status: 64,
                        message: "--socket needs the path of the agent's socket (e.g. /run/keymgr/keymgr.sock)")
                    continue
                }
                socket = value
            case "--home":
                home = value ?? ""
            case "--pin-fd", "--password-fd":
                // A value that is not a descriptor number is left to the full parser, which says so as in embedded mode.
                guard let value, let number = Int32(value), number >= 0 else { continue }
                if !namedDescriptors.contains(number) { namedDescriptors.append(number) }
            default:
                continue
            }
        }
    }
}

/// An error the client reports itself, the way keymgr-core reports its own: `keymgr: <message>` on stderr, and
/// `{"error":{"code","message"}}` on stdout with `--json`.
struct ClientFailure: Error {
    let code: String
    let status: Int32
    let message: String

    static func exit(_ failure: ClientFailure, json: Bool) -> Never {
        report(code: failure.code, message: failure.message, json: json)
        Glibc.exit(failure.status)
    }

    /// Prints an error the way keymgr-core does: the message without control or bidi characters.
    static func report(code: String, message: String, json: Bool) {
        let printable = PrintableText.stripped(message)
        Output.write(2, "keymgr: \(printable)\n")
        if json { Output.write(1, ErrorDocument.json(code: code, message: printable) + "\n") }
    }
}

/// The environment, read with getenv (no Foundation).
enum ClientEnvironment {
    /// The variable's value, or nil when it is unset or empty.
    static func value(_ name: String) -> String? {
        guard let raw = getenv(name) else { return nil }
        let value = String(cString: raw)
        return value.isEmpty ? nil : value
    }
}

enum ClientFiles {
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// `file` opened with the caller's own rights, as the command will use it: read (a FIFO's open does not wait for
    /// a writer), or created new with mode 0600. The kernel decides, with everything it knows (ACLs included).
    static func open(_ file: NamedFileArgument) -> Result<Int32, ClientFailure> {
        let descriptor = file.access == .read
            ? Glibc.open(file.path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
            : Glibc.open(file.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0o600)
        guard descriptor >= 0 else {
            let error = errno
            let message = NamedFileArgument.refusal(path: file.path, access: file.access, uid: getuid(),
                                                    reason: String(cString: strerror(error)))
            return .failure(error == EEXIST
                ? ClientFailure(code: "usage", status: 64, message: message + ": name a new file")
                : ClientFailure(code: "badInput", status: 65, message: message))
        }
        if file.access == .read { _ = fcntl(descriptor, F_SETFL, 0) }
        return .success(descriptor)
    }

    /// After the command: a file the client created for it and the command left empty (it failed, was refused, or
    /// had nothing to write) is removed, if the name still holds that file.
    static func discardIfUnused(_ file: NamedFileArgument, descriptor: Int32) {
        guard file.access == .create else { return }
        var opened = stat()
        var named = stat()
        guard fstat(descriptor, &opened) == 0, opened.st_size == 0,
              lstat(file.path, &named) == 0, named.st_dev == opened.st_dev, named.st_ino == opened.st_ino else { return }
        unlink(file.path)
    }
}

/// Whole writes to a descriptor, retried on EINTR and short writes; errors are ignored (nowhere left to report).
enum Output {
    static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += written
            }
        }
    }
}

/// `{"error":{"code":"…","message":"…"}}` exactly as keymgr-core writes it (sorted keys, slashes unescaped, DEL,
/// C1 and bidi controls as `\uXXXX`: AgentWire's one JSON writer), for text already through `PrintableText.stripped`.
enum ErrorDocument {
    static func json(code: String, message: String) -> String {
        var writer = JSONWriter()
        writer.raw("{\"error\":{\"code\":")
        writer.string(code, escapingInvisibles: true)
        writer.raw(",\"message\":")
        writer.string(message, escapingInvisibles: true)
        writer.raw("}}")
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
