import AgentWire
import Foundation
import KeyManager

/// A table column: its header and how it gives up room when a line does not fit the width.
struct TableColumn {
    /// How a column gives up room, in the order `TextTable` asks for it.
    enum Fit {
        /// Shown whole, always: auth types, states, short kids, counts, event names.
        case whole
        /// Cut with `…`, the widest such column first, never below `min` terminal columns.
        case cut(min: Int)
        /// A timestamp (`2026-11-25T06:48:55Z`): to the minute (`2026-11-25 06:48`), then the date alone.
        case time
        /// Left out whole, before anything else gives up room (what `--wide` and `--json` always have).
        case optional
    }

    let header: String
    let fit: Fit

    init(_ header: String, _ fit: Fit = .cut(min: TextTable.narrowest)) {
        self.header = header
        self.fit = fit
    }

    static func whole(_ header: String) -> TableColumn { TableColumn(header, .whole) }
    static func time(_ header: String) -> TableColumn { TableColumn(header, .time) }
}

/// How many terminal columns a table may take: the request's `COLUMNS` when it holds a positive number, else the
/// terminal's width when the request's stdout is a terminal, else 80 (a pipe or a file gets what it always got).
enum TableWidth {
    static let standard = 80

    /// The width for `columns` (the request's `COLUMNS`) and the request's stdout, `output`.
    static func of(columns: String?, output: Int32) -> Int {
        if let columns, let width = Int(columns), width > 0 { return width }
        guard isatty(output) == 1 else { return standard }
        var size = winsize()
        guard ioctl(output, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return standard }
        return Int(size.ws_col)
    }
}

/// keymgr's one width rule for tables (`list`, `users`, `audit`, `admin devices`, `admin stale`, `sync`).
///
/// Columns are padded to their widest cell (in terminal columns), two spaces apart, no trailing blanks. With a
/// `maxWidth`, room is given up in this order until every line fits: optional columns are left out (rightmost
/// first); timestamps shorten to the minute; cuttable columns are cut with `…`, the widest first, down to
/// `comfortable` columns; timestamps shorten to the date; cuttable columns are cut down to their minimum. Columns
/// that are `whole` (auth types, states, kids) are never cut, so a line can stay wider than `maxWidth` when the
/// whole columns alone do not fit.
///
/// The widths come from `sample`: a table printed as it is read (`audit` over a million entries) sizes its
/// columns from its first rows, and later rows are cut to the same widths (whole columns may then push a line).
struct TextTable {
    /// A cut column keeps at least this many terminal columns unless its own minimum says otherwise.
    static let narrowest = 4
    /// Cutting stops at this width before timestamps lose their time of day.
    static let comfortable = 12

    let columns: [TableColumn]
    /// The columns shown, by index into `columns`.
    private(set) var shown: [Int]
    /// Each shown column's width, by index into `columns`.
    private(set) var widths: [Int]
    /// 0: whole timestamps, 1: to the minute, 2: the date.
    private(set) var timeStage = 0

    init(_ columns: [TableColumn], sample: [[String]], maxWidth: Int?) {
        self.columns = columns
        shown = Array(columns.indices)
        widths = columns.map { TextTable.width($0.header) }
        var timeWidths = [[Int]](repeating: [0, 0, 0], count: columns.count)
        for row in sample {
            for (index, raw) in row.enumerated() where index < columns.count {
                let cell = TextTable.clean(raw)
                widths[index] = max(widths[index], TextTable.width(cell))
                if case .time = columns[index].fit {
                    for stage in 0...2 {
                        timeWidths[index][stage] = max(timeWidths[index][stage], TextTable.width(TextTable.compact(cell, stage: stage)))
                    }
                }
            }
        }
        guard let maxWidth else { return }
        var total: Int { shown.reduce(0) { $0 + widths[$1] } + 2 * max(0, shown.count - 1) }
        for index in columns.indices.reversed() where total > maxWidth {
            if case .optional = columns[index].fit { shown.removeAll { $0 == index } }
        }
        let setTimes = { (stage: Int, table: inout TextTable) in
            table.timeStage = stage
            for index in columns.indices {
                if case .time = columns[index].fit {
                    table.widths[index] = max(TextTable.width(columns[index].header), timeWidths[index][stage])
                }
            }
        }
        if total > maxWidth { setTimes(1, &self) }
        cut(to: maxWidth, floor: TextTable.comfortable)
        if total > maxWidth { setTimes(2, &self) }
        cut(to: maxWidth, floor: 0)
    }

    /// Narrows the widest cuttable column one terminal column at a time until the line fits `maxWidth` or every
    /// cuttable column is at `max(floor, its minimum)`.
    private mutating func cut(to maxWidth: Int, floor: Int) {
        var total = shown.reduce(0) { $0 + widths[$1] } + 2 * max(0, shown.count - 1)
        while total > maxWidth {
            let candidates = shown.filter { index in
                guard case .cut(let minimum) = columns[index].fit else { return false }
                return widths[index] > max(floor, minimum)
            }
            guard let widest = candidates.max(by: { widths[$0] < widths[$1] }) else { return }
            widths[widest] -= 1
            total -= 1
        }
    }

    /// The header line.
    var header: String { line(columns.map(\.header), isHeader: true) }

    /// One row as a line, ending in a newline.
    func line(_ row: [String]) -> String { line(row, isHeader: false) }

    private func line(_ row: [String], isHeader: Bool) -> String {
        var line = ""
        for (position, index) in shown.enumerated() {
            var cell = index < row.count ? row[index] : ""
            if !isHeader {
                cell = TextTable.clean(cell)
                if case .time = columns[index].fit { cell = TextTable.compact(cell, stage: timeStage) }
            }
            let text: String
            if case .cut = columns[index].fit { text = TextTable.cut(cell, to: widths[index]) } else { text = cell }
            line += text
            if position < shown.count - 1 {
                line += String(repeating: " ", count: max(0, widths[index] - TextTable.width(text)) + 2)
            }
        }
        while line.hasSuffix(" ") { line.removeLast() }
        return line + "\n"
    }

    /// A cell as a terminal may show it: what a server sent (device names, user ids) with no control or bidi
    /// character, on one line.
    static func clean(_ text: String) -> String {
        printable(PrintableText.stripped(text).replacingOccurrences(of: "\n", with: " "))
    }

    /// A timestamp `2026-11-25T06:48:55Z` at `stage` 0 (as is), 1 (`2026-11-25 06:48`) or 2 (`2026-11-25`); any
    /// other text as is.
    static func compact(_ text: String, stage: Int) -> String {
        guard stage > 0, text.utf8.count == 20, text.hasSuffix("Z"),
              text.utf8[text.utf8.index(text.utf8.startIndex, offsetBy: 10)] == UInt8(ascii: "T") else { return text }
        return stage == 1 ? text.prefix(10) + " " + text.dropFirst(11).prefix(5) : String(text.prefix(10))
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

/// A table printed as its rows arrive (`audit` over a million entries): the first `sampleSize` rows size the
/// columns under the width rule, later rows are cut to the same widths. Lines go into `out`, which is written
/// out every 64 KiB.
struct StreamedTable {
    static let sampleSize = 256

    let columns: [TableColumn]
    /// The width the lines fit (`TableWidth`), or nil for `--wide`.
    let maxWidth: Int?
    private var sample: [[String]] = []
    private var layout: TextTable?

    init(columns: [TableColumn], maxWidth: Int?) {
        self.columns = columns
        self.maxWidth = maxWidth
    }

    mutating func add(_ row: [String], into out: inout JSONBytes) {
        if let layout {
            out.text(layout.line(row))
            out.flush()
            return
        }
        sample.append(row)
        if sample.count >= Self.sampleSize { start(into: &out) }
    }

    /// Prints the rows still held; false when there was no row at all (nothing was printed).
    mutating func finish(into out: inout JSONBytes) -> Bool {
        if layout == nil {
            guard !sample.isEmpty else { return false }
            start(into: &out)
        }
        return true
    }

    private mutating func start(into out: inout JSONBytes) {
        let table = TextTable(columns, sample: sample, maxWidth: maxWidth)
        out.text(table.header)
        for row in sample { out.text(table.line(row)) }
        sample = []
        layout = table
        out.flush()
    }
}
