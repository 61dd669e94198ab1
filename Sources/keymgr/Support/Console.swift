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
        return escapingInvisibles(String(decoding: data, as: UTF8.self))
    }

    /// JSON with DEL, C1 controls and bidi controls written as `\uXXXX` (the encoder escapes only C0): the same
    /// values for a JSON reader, but nothing a server sent can move the cursor or reorder text on a terminal.
    static func escapingInvisibles(_ json: String) -> String {
        let unsafe = { (value: UInt32) in (0x7F...0x9F).contains(value) || PrintableText.bidiControls.contains(value) }
        guard json.unicodeScalars.contains(where: { unsafe($0.value) }) else { return json }
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if unsafe(scalar.value) {
                out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// A one-line report of what was done, on stderr; not with `--json` or `--quiet`.
    func confirm(_ text: String) {
        guard !json, !quiet else { return }
        StandardStream.error.write(PrintableText.stripped(text) + "\n")
    }

    /// Something a person should know that is not an error, on stderr; not with `--quiet`.
    func warn(_ text: String) {
        guard !quiet else { return }
        StandardStream.error.write("keymgr: warning: \(PrintableText.stripped(text))\n")
    }

    /// What keymgr is doing, on stderr; only with `--verbose`.
    func detail(_ text: String) {
        guard verbose else { return }
        StandardStream.error.write("keymgr: \(text)\n")
    }

    /// Prints rows under headers with aligned columns on stdout; says so on stderr when there are no rows.
    /// Prints rows under headers with aligned columns on stdout, cut to fit `TextTable.standardWidth` columns
    /// unless `wide`; columns in `keepWhole` are never cut. Says so on stderr when there are no rows.
    func table(_ headers: [String], _ rows: [[String]], empty: String, wide: Bool = false, keepWhole: Set<Int> = []) {
        guard !rows.isEmpty else {
            if !quiet { StandardStream.error.write("\(empty)\n") }
            return
        }
        // Cells may hold what a server sent (device names): no control or bidi character reaches the terminal.
        let rows = rows.map { $0.map { PrintableText.stripped($0).replacingOccurrences(of: "\n", with: " ") } }
        answer(TextTable(headers: headers, rows: rows, keepWhole: keepWhole,
                         maxWidth: wide ? nil : TextTable.standardWidth).rendered)
    }
}

/// Columns padded to their widest cell (in terminal columns), two spaces apart, no trailing blanks; with a
/// `maxWidth`, the widest columns not in `keepWhole` are cut with `…` until every line fits.
struct TextTable {
    /// What a table fits by default: a classic terminal.
    static let standardWidth = 80
    /// A cut column keeps at least this many terminal columns.
    static let narrowest = 4

    let headers: [String]
    let rows: [[String]]
    var keepWhole: Set<Int> = []
    var maxWidth: Int?

    var rendered: String {
        var widths = headers.map(TextTable.width)
        let cells = rows.map { $0.map(TextTable.printable) }
        for row in cells {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], TextTable.width(cell))
            }
        }
        if let maxWidth { widths = fitted(widths, into: maxWidth) }
        var out = ""
        for row in [headers] + cells {
            var line = ""
            for (index, cell) in row.enumerated() where index < widths.count {
                let shown = TextTable.cut(cell, to: widths[index])
                line += shown
                if index < row.count - 1 { line += String(repeating: " ", count: widths[index] - TextTable.width(shown) + 2) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }

    /// Narrows the widest cuttable column one column at a time until the line fits or nothing more can go.
    private func fitted(_ natural: [Int], into maxWidth: Int) -> [Int] {
        var widths = natural
        var total = widths.reduce(0, +) + 2 * max(0, widths.count - 1)
        while total > maxWidth {
            let candidates = widths.indices.filter { !keepWhole.contains($0) && widths[$0] > TextTable.narrowest }
            guard let widest = candidates.max(by: { widths[$0] < widths[$1] }) else { break }
            widths[widest] -= 1
            total -= 1
        }
        return widths
    }

    /// `text` cut to `width` terminal columns, ending in `…` when anything was cut.
    static func cut(_ text: String, to width: Int) -> String {
        guard TextTable.width(text) > width else { return text }
        var out = ""
        var used = 0
        for character in text {
            let next = TextTable.width(String(character))
            guard used + next <= width - 1 else { break }
            out.append(character)
            used += next
        }
        return out + "…"
    }

    /// Control characters would break the columns: show them escaped (user ids are the server's, not ours).
    static func printable(_ text: String) -> String {
        // Controls, and the bidirectional overrides and isolates that make text display other than it is (U+202E).
        let unsafe = { (scalar: Unicode.Scalar) in
            scalar.properties.generalCategory == .control || PrintableText.bidiControls.contains(scalar.value)
        }
        guard text.unicodeScalars.contains(where: unsafe) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if unsafe(scalar) {
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
        write(bytes: Array(text.utf8))
    }

    func write(bytes: [UInt8]) {
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
    }
}
