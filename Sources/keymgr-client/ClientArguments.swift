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

/// Text made safe for a terminal, with keymgr-core's rule: no C0/C1 control characters but tab and line feed, no
/// DEL, no Unicode bidirectional controls.
enum PrintableText {
    /// U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069: the bidirectional controls keymgr keeps off terminals.
    static let bidiControls: Set<UInt32> = [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                                            0x2066, 0x2067, 0x2068, 0x2069]

    static func stripped(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if value == 0x09 || value == 0x0A
                || !(value < 0x20 || (0x7F...0x9F).contains(value) || bidiControls.contains(value)) {
                scalars.append(scalar)
            }
        }
        return String(scalars)
    }
}

/// `{"error":{"code":"…","message":"…"}}` exactly as keymgr-core writes it (sorted keys, slashes unescaped, DEL,
/// C1 and bidi controls as `\uXXXX`), for text already through `PrintableText.stripped`.
enum ErrorDocument {
    static func json(code: String, message: String) -> String {
        "{\"error\":{\"code\":\(string(code)),\"message\":\(string(message))}}"
    }

    private static func string(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x22: out += "\\\""
            case 0x5C: out += "\\\\"
            case 0x0A: out += "\\n"
            case 0x09: out += "\\t"
            case 0x0D: out += "\\r"
            case 0x08: out += "\\b"
            case 0x0C: out += "\\f"
            case let value where value < 0x20 || (0x7F...0x9F).contains(value) || PrintableText.bidiControls.contains(value):
                out += "\\u" + hex4(value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    private static func hex4(_ value: UInt32) -> String {
        let digits = Array("0123456789abcdef")
        return String((0..<4).reversed().map { digits[Int((value >> (UInt32($0) * 4)) & 0xF)] })
    }
}
