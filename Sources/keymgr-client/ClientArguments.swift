import AgentWire
import Glibc

/// What the client needs to know about its command line, read without an argument parser: the options that choose
/// the mode, the descriptors the command will read, and whether errors are wanted in JSON. Only arguments before
/// `--` count; the full parser (in the agent or keymgr-core) reads the command line again, whole.
struct ClientArguments {
    /// The arguments as given, without the program name.
    let all: [String]
    /// `--socket PATH` / `--socket=PATH`.
    private(set) var socket: String?
    /// `--home DIR` / `--home=DIR`.
    private(set) var home: String?
    /// `--json`.
    private(set) var json = false
    /// The first argument that is neither an option nor the value of `--home`/`--socket`: the subcommand.
    private(set) var subcommand: String?
    /// The descriptor numbers named by `--pin-fd` / `--password-fd`, in order, without repeats.
    private(set) var namedDescriptors: [Int32] = []
    /// A mistake the client itself must report (usage, 64).
    private(set) var failure: ClientFailure?

    init(_ arguments: some Sequence<String>) {
        all = Array(arguments)
        var index = 0
        while index < all.count {
            let argument = all[index]
            if argument == "--" { break }
            if let (name, inline) = Self.option(argument, among: ["--socket", "--home", "--pin-fd", "--password-fd"]) {
                var value = inline
                if value == nil {
                    if index + 1 < all.count {
                        index += 1
                        value = all[index]
                    }
                }
                record(name, value)
            } else if argument == "--json" {
                json = true
            } else if subcommand == nil, !argument.hasPrefix("-") {
                subcommand = argument
            }
            index += 1
        }
    }

    /// `(name, inline value)` when `argument` is one of `names`, as `--name` or `--name=value`.
    private static func option(_ argument: String, among names: [String]) -> (String, String?)? {
        for name in names {
            if argument == name { return (name, nil) }
            if argument.hasPrefix(name + "=") { return (name, String(argument.dropFirst(name.count + 1))) }
        }
        return nil
    }

    private mutating func record(_ name: String, _ value: String?) {
        switch name {
        case "--socket":
            guard let value, !value.isEmpty else {
                failure = failure ?? ClientFailure(code: "usage", status: 64,
                    message: "--socket needs the path of the agent's socket (e.g. /run/keymgr/keymgr.sock)")
                return
            }
            socket = value
        case "--home":
            home = value ?? ""
        default:
            // A value that is not a descriptor number is left to the full parser, which says so as in embedded mode.
            guard let value, let number = Int32(value), number >= 0 else { return }
            if !namedDescriptors.contains(number) { namedDescriptors.append(number) }
        }
    }
}

/// An error the client reports itself, the way keymgr-core reports its own: `keymgr: <message>` on stderr, and
/// `{"error":{"code","message"}}` on stdout with `--json`.
struct ClientFailure {
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
