import Foundation
import KeyManager

/// Where keymgr's output goes: a command's answer on stdout, everything said to a person on stderr.
///
/// With `--json` stdout carries exactly one JSON document; confirmations are dropped (the document is the
/// confirmation). `--quiet` drops confirmations and warnings; `--verbose` adds details on stderr.
struct Console {
    let json: Bool
    let quiet: Bool
    let verbose: Bool

    /// Writes a command's human answer (a table, a JWS, a verdict) to stdout.
    func answer(_ text: String) {
        StandardStream.output.write(text.hasSuffix("\n") ? text : text + "\n")
    }

    /// Writes one JSON document to stdout: sorted keys, no whitespace, one line, ISO 8601 UTC timestamps.
    func answer(json value: some Encodable) {
        StandardStream.output.write(Self.encoded(value) + "\n")
    }

    /// The one JSON encoding of keymgr's output.
    static func encoded(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISOTime.string(from: date))
        }
        // The output types hold strings, numbers, dates and JSON values: nothing an encoder can refuse.
        guard let data = try? encoder.encode(value) else { return "null" }
        return String(decoding: data, as: UTF8.self)
    }

    /// A one-line report of what was done, on stderr; not with `--json` or `--quiet`.
    func confirm(_ text: String) {
        guard !json, !quiet else { return }
        StandardStream.error.write(text + "\n")
    }

    /// Something a person should know that is not an error, on stderr; not with `--quiet`.
    func warn(_ text: String) {
        guard !quiet else { return }
        StandardStream.error.write("keymgr: warning: \(text)\n")
    }

    /// What keymgr is doing, on stderr; only with `--verbose`.
    func detail(_ text: String) {
        guard verbose else { return }
        StandardStream.error.write("keymgr: \(text)\n")
    }

    /// Prints rows under headers with aligned columns on stdout; says so on stderr when there are no rows.
    func table(_ headers: [String], _ rows: [[String]], empty: String) {
        guard !rows.isEmpty else {
            if !quiet { StandardStream.error.write("\(empty)\n") }
            return
        }
        answer(TextTable(headers: headers, rows: rows).rendered)
    }
}

/// Columns padded to their widest cell (in terminal columns), two spaces apart, no trailing blanks.
struct TextTable {
    let headers: [String]
    let rows: [[String]]

    var rendered: String {
        var widths = headers.map(TextTable.width)
        let cells = rows.map { $0.map(TextTable.printable) }
        for row in cells {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], TextTable.width(cell))
            }
        }
        var out = ""
        for row in [headers] + cells {
            var line = ""
            for (index, cell) in row.enumerated() where index < widths.count {
                line += cell
                if index < row.count - 1 { line += String(repeating: " ", count: widths[index] - TextTable.width(cell) + 2) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }

    /// Control characters would break the columns: show them escaped (user ids are the server's, not ours).
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar.properties.generalCategory == .control {
                out += scalar.escaped(asASCII: true)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// How many terminal columns `text` takes: East Asian wide characters and emoji take two, the rest one.
    static func width(_ text: String) -> Int {
        text.reduce(0) { total, character in
            guard let scalar = character.unicodeScalars.first else { return total }
            return total + (isWide(scalar) ? 2 : 1)
        }
    }

    private static func isWide(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.properties.isEmojiPresentation { return true }
        switch scalar.value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
             0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6,
             0x20000...0x3FFFD:
            return true
        default:
            return false
        }
    }
}

/// stdout or stderr, written with write(2) so nothing waits in a buffer when the process exits.
struct StandardStream {
    let descriptor: Int32

    static let output = StandardStream(descriptor: STDOUT_FILENO)
    static let error = StandardStream(descriptor: STDERR_FILENO)

    func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                Foundation.write(descriptor, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                return  // The reader went away (EPIPE) or the stream is closed: nothing more to say.
            }
            offset += written
        }
        bytes.removeAll()
    }
}
