import CSQLiteOptions
import Foundation
import GRDB

/// The keyed functions of row integrity, supplied by the crypto layer with keys derived from the master key
/// (Storage does no crypto itself).
///
/// `mac` is HMAC-SHA256 over a row's canonical encoding: the table name and every column but `row_mac`, by name,
/// type and value, so the primary key (the row's identity) is inside it and a column added later is covered
/// without code. `tag` is HMAC-SHA256 under another key over a row's MAC: the per-row tags are never stored, and
/// each table's committed row set is the XOR of its rows' tags (with the row count), kept in `device.row_sets`.
package struct RowIntegrityKeys: Sendable {
    let mac: @Sendable ([UInt8]) throws -> [UInt8]
    let tag: @Sendable ([UInt8]) throws -> [UInt8]

    package init(mac: @escaping @Sendable ([UInt8]) throws -> [UInt8], tag: @escaping @Sendable ([UInt8]) throws -> [UInt8]) {
        self.mac = mac
        self.tag = tag
    }
}

/// What `keymgr audit verify` found wrong with one row or one table's set of rows.
package struct RowProblem: Sendable, Equatable {
    /// The table.
    package let table: String
    /// The row, as its primary key (`kid=…`), or nil for a problem with the table's set of rows.
    package let row: String?
    /// What is wrong, in words.
    package let reason: String
}

/// Whether the store's rows carry MACs yet (see `StoreReader.rowStampState()`).
package enum RowStampState: Sendable, Equatable {
    /// Stamped, under the schema version keymgr runs.
    case current
    /// Made before row MACs (no committed row sets): stamped once, on the first open with the master key.
    case unstamped
    /// Stamped under an older schema: a later migration added tables or columns, so every row is verified under the
    /// columns it was stamped with and stamped again, once.
    case olderSchema
}

/// The device row as one read found it: its MAC is checked once the master key is known, without reading it again
/// (the open's proof that the key is this store's).
package struct DeviceRowSnapshot: Sendable, Equatable {
    let columns: [String]
    let values: [RowValue]

    init(_ row: Row) {
        (columns, values) = RowIntegrity.columnsAndValues(of: row)
    }

    /// Whether the row's MAC holds under `keys`.
    package func macHolds(keys: RowIntegrityKeys) throws -> Bool {
        try RowIntegrity.holds(table: RowIntegrity.rootTable, columns: columns, values: values, keys: keys)
    }
}

/// One row value as SQLite holds it.
enum RowValue: Equatable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text([UInt8])
    case blob([UInt8])

    init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let integer): self = .integer(integer)
        case .double(let real): self = .real(real)
        case .string(let text): self = .text(Array(text.utf8))
        case .blob(let data): self = .blob([UInt8](data))
        }
    }

    /// For messages: the value as text, without control or bidirectional characters, cut at 80 characters.
    var display: String {
        switch self {
        case .null: return "NULL"
        case .integer(let integer): return String(integer)
        case .real(let real): return String(real)
        case .blob(let bytes): return "x'" + Hex.encode(Array(bytes.prefix(16))) + (bytes.count > 16 ? "…'" : "'")
        case .text(let bytes):
            let text = String(decoding: bytes, as: UTF8.self)
            let safe = String(String.UnicodeScalarView(text.unicodeScalars.filter { scalar in
                !(scalar.properties.generalCategory == .control || scalar.properties.generalCategory == .format
                  || scalar.properties.generalCategory == .lineSeparator
                  || scalar.properties.generalCategory == .paragraphSeparator)
            }))
            return safe.count > 80 ? String(safe.prefix(80)) + "…" : safe
        }
    }
}

/// The canonical encoding and the committed row sets.
enum RowIntegrity {
    /// The column that holds each row's MAC; a table with it is covered.
    static let macColumn = "row_mac"
    /// The device row: its MAC is the root that covers the row sets, so it is not in a set itself.
    static let rootTable = "device"
    /// The device row's column that commits the row sets.
    static let setsColumn = "row_sets"
    /// The rowid a write transaction's reads add in front of `*`, to tell rows it changed itself (not stamped yet).
    static let rowidColumn = "keymgr_rowid"

    /// `keymgr-row-v1`, the table, then per column (but `row_mac`) its name, a type letter and its value, each
    /// length-prefixed (u32 big-endian), so no two rows of any tables encode alike.
    static func encoding(table: String, columns: [String], values: [RowValue]) -> [UInt8] {
        var out = Array("keymgr-row-v1".utf8)
        out.reserveCapacity(256)
        func field(_ bytes: [UInt8]) {
            let count = UInt32(truncatingIfNeeded: bytes.count)
            out.append(contentsOf: [UInt8(count >> 24), UInt8(truncatingIfNeeded: count >> 16),
                                    UInt8(truncatingIfNeeded: count >> 8), UInt8(truncatingIfNeeded: count)])
            out.append(contentsOf: bytes)
        }
        func number(_ value: UInt64) {
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        field(Array(table.utf8))
        for (name, value) in zip(columns, values) where name != macColumn {
            field(Array(name.utf8))
            switch value {
            case .null: out.append(UInt8(ascii: "N"))
            case .integer(let integer):
                out.append(UInt8(ascii: "I"))
                number(UInt64(bitPattern: integer))
            case .real(let real):
                out.append(UInt8(ascii: "R"))
                number(real.bitPattern)
            case .text(let bytes):
                out.append(UInt8(ascii: "T"))
                field(bytes)
            case .blob(let bytes):
                out.append(UInt8(ascii: "B"))
                field(bytes)
            }
        }
        return out
    }

    /// The columns and values of a row read with `SELECT *`.
    static func columnsAndValues(of row: Row) -> ([String], [RowValue]) {
        var columns: [String] = []
        var values: [RowValue] = []
        columns.reserveCapacity(row.count)
        values.reserveCapacity(row.count)
        for (column, value) in row where column != rowidColumn {
            columns.append(column)
            values.append(RowValue(value))
        }
        return (columns, values)
    }

    /// Whether `values` (of `columns`) carry a MAC that holds.
    ///
    /// The device row of a store stamped under an older schema is also checked as it was stamped: a later migration's
    /// `ADD COLUMN` appends device columns that stay NULL until keymgr first writes the row (and stamps it anew under
    /// the latest schema). Only trailing NULLs are left out, and only while the row sets the MAC covers name an older
    /// schema, so an edit of any value still shows.
    static func holds(table: String, columns: [String], values: [RowValue], keys: RowIntegrityKeys) throws -> Bool {
        if try macHolds(table: table, columns: columns, values: values, keys: keys) { return true }
        guard table == rootTable, let sets = columns.firstIndex(of: setsColumn), case .text(let text) = values[sets],
              let schema = RowSets(String(decoding: text, as: UTF8.self))?.schema,
              schema < EmbeddedMigration.latestVersion else { return false }
        var count = columns.count
        while count > 0, values[count - 1] == .null {
            count -= 1
            if try macHolds(table: table, columns: Array(columns[..<count]), values: Array(values[..<count]), keys: keys) {
                return true
            }
        }
        return false
    }

    private static func macHolds(table: String, columns: [String], values: [RowValue], keys: RowIntegrityKeys) throws -> Bool {
        guard let index = columns.firstIndex(of: macColumn), case .blob(let stored) = values[index] else { return false }
        return constantTimeEqual(stored, try keys.mac(encoding(table: table, columns: columns, values: values)))
    }

    static func tamperedError(table: String, row: String) -> StorageError {
        StorageError(.tampered, "the \(table) row \(row) was changed outside keymgr (its MAC does not hold under the "
            + "master key), so keymgr will not use it: run `keymgr audit verify` to see everything that was changed, "
            + "and restore the store from a backup")
    }
}

/// Each covered table's committed set of rows: how many, the XOR of their tags, and the columns they were stamped
/// over. Stored as text in `device.row_sets`, under the device row's MAC.
struct RowSets {
    struct TableSet: Equatable {
        var count: Int
        var digest: [UInt8]
        var columns: [String]

        mutating func toggle(_ tag: [UInt8], adding: Bool) {
            for index in digest.indices { digest[index] ^= tag[index] }
            count += adding ? 1 : -1
        }

        /// `<table> <count> <hex digest> <column,column,…>`, the table name already checked.
        init?(line: ArraySlice<UInt8>) {
            let parts = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard parts.count == 4, let count = Int(String(decoding: parts[1], as: UTF8.self)),
                  let digest = Hex.decode(String(decoding: parts[2], as: UTF8.self)), digest.count == 32 else { return nil }
            self.init(count: count, digest: digest,
                      columns: parts[3].split(separator: UInt8(ascii: ",")).map { String(decoding: $0, as: UTF8.self) })
        }

        init(count: Int, digest: [UInt8], columns: [String]) {
            self.count = count
            self.digest = digest
            self.columns = columns
        }

        func line(_ table: String) -> String {
            "\(table) \(count) \(Hex.encode(digest)) \(columns.joined(separator: ","))"
        }
    }

    var schema: Int
    /// Lines not decoded yet, by table: a write decodes only the tables it touched.
    private var raw: [String: ArraySlice<UInt8>] = [:]
    private var decoded: [String: TableSet] = [:]

    static let header = "keymgr-row-sets-v1"

    init(schema: Int) {
        self.schema = schema
    }

    init?(_ text: String) {
        var utf8 = Array(text.utf8)[...]
        guard let schema = Self.schema(of: &utf8) else { return nil }
        self.schema = schema
        for line in utf8.split(separator: UInt8(ascii: "\n")) {
            let name = line.prefix { $0 != UInt8(ascii: " ") }
            raw[String(decoding: name, as: UTF8.self)] = line
        }
    }

    /// The schema version of the header line, which it consumes; nil when there is none.
    static func schema(of utf8: inout ArraySlice<UInt8>) -> Int? {
        let prefix = Array((header + " schema=").utf8)
        guard utf8.starts(with: prefix) else { return nil }
        utf8 = utf8.dropFirst(prefix.count)
        var schema = 0
        while let digit = utf8.first, digit != UInt8(ascii: "\n") {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit), schema < 1_000_000 else { return nil }
            schema = schema * 10 + Int(digit - UInt8(ascii: "0"))
            utf8 = utf8.dropFirst()
        }
        return schema
    }

    var tables: Set<String> { Set(raw.keys).union(decoded.keys) }

    subscript(table: String) -> TableSet? {
        get { decoded[table] ?? raw[table].flatMap(TableSet.init(line:)) }
        set {
            decoded[table] = newValue
            raw[table] = nil
        }
    }

    var text: String {
        var out = "\(Self.header) schema=\(schema)\n"
        for table in tables.sorted() {
            if let set = decoded[table] {
                out += set.line(table) + "\n"
            } else if let line = raw[table] {
                out += String(decoding: line, as: UTF8.self) + "\n"
            }
        }
        return out
    }
}

/// The changes one write transaction makes, logged by SQLite's pre-update hook with the old values of every
/// changed or deleted row.
final class RowChangeLog {
    private let connection: UnsafeMutableRawPointer
    private let log: OpaquePointer

    struct Event {
        let op: UInt8
        let table: String
        let oldRowid: Int64
        let newRowid: Int64
        let old: [RowValue]
    }

    init(_ db: Database) throws {
        guard let connection = UnsafeMutableRawPointer(db.sqliteConnection),
              let log = keymgr_row_log_install(connection) else {
            throw StorageError(.failure, "could not watch the write transaction's changes (out of memory)")
        }
        self.connection = connection
        self.log = log
    }

    func pause() { keymgr_row_log_pause(log, 1) }

    /// Whether this transaction inserted, changed or deleted the row at `rowid` so far.
    func touches(_ table: String, _ rowid: Int64) throws -> Bool {
        try events().contains { $0.table == table && ($0.newRowid == rowid || $0.oldRowid == rowid) }
    }

    func remove() { keymgr_row_log_remove(connection, log) }

    /// The events parsed so far, and how many bytes of the log they took.
    private var parsed: [Event] = []
    private var parsedLength = 0

    func events() throws -> [Event] {
        var length = 0
        var failed: Int32 = 0
        guard let base = keymgr_row_log_bytes(log, &length, &failed), length > 0 else {
            if failed != 0 { throw StorageError(.failure, "could not log the write transaction's changes") }
            return []
        }
        guard failed == 0 else { throw StorageError(.failure, "could not log the write transaction's changes") }
        guard length > parsedLength else { return parsed }
        let bytes = UnsafeRawBufferPointer(start: base, count: length)
        var offset = parsedLength
        func take<T>(_ type: T.Type) -> T {
            defer { offset += MemoryLayout<T>.size }
            return bytes.loadUnaligned(fromByteOffset: offset, as: T.self)
        }
        func takeBytes(_ count: Int) -> [UInt8] {
            defer { offset += count }
            return Array(bytes[offset..<offset + count])
        }
        var events: [Event] = []
        while offset < length {
            let op = take(UInt8.self)
            let table = String(decoding: takeBytes(Int(take(UInt32.self))), as: UTF8.self)
            let oldRowid = take(Int64.self)
            let newRowid = take(Int64.self)
            let columns = Int(take(UInt32.self))
            var old: [RowValue] = []
            old.reserveCapacity(columns)
            for _ in 0..<columns {
                switch take(UInt8.self) {
                case 1: old.append(.integer(take(Int64.self)))
                case 2: old.append(.real(take(Double.self)))
                case 3: old.append(.text(takeBytes(Int(take(UInt32.self)))))
                case 4: old.append(.blob(takeBytes(Int(take(UInt32.self)))))
                default: old.append(.null)
                }
            }
            events.append(Event(op: op, table: table, oldRowid: oldRowid, newRowid: newRowid, old: old))
        }
        parsed += events
        parsedLength = length
        return parsed
    }
}

extension StoreReader {
    /// `row`, read with `SELECT * FROM table`, once its MAC holds (when this reader checks rows).
    ///
    /// - Throws: `StorageError` `.tampered` naming the table and the row.
    func checked(_ table: String, _ row: Row, rowid: Int64? = nil) throws -> Row {
        guard let rowKeys else { return row }
        // A row this transaction wrote is stamped when it commits; its old values are checked then.
        if let log = (self as? StoreWriter)?.changes, let rowid = rowid ?? row[RowIntegrity.rowidColumn],
           try log.touches(table, rowid) { return row }
        let (columns, values) = RowIntegrity.columnsAndValues(of: row)
        guard try RowIntegrity.holds(table: table, columns: columns, values: values, keys: rowKeys) else {
            throw RowIntegrity.tamperedError(table: table, row: try rowName(table, columns, values))
        }
        return row
    }

    /// The records `SELECT * FROM table …` finds, each row's MAC checked first.
    func checkedAll<Record: FetchableRecord>(_ type: Record.Type, _ table: String, sql: String,
                                             arguments: StatementArguments = StatementArguments()) throws -> [Record] {
        try Row.fetchAll(db, sql: withRowid(sql), arguments: arguments).map { try Record(row: try checked(table, $0)) }
    }

    /// The record `SELECT * FROM table …` finds, its MAC checked first.
    func checkedOne<Record: FetchableRecord>(_ type: Record.Type, _ table: String, sql: String,
                                             arguments: StatementArguments = StatementArguments()) throws -> Record? {
        try Row.fetchOne(db, sql: withRowid(sql), arguments: arguments).map { try Record(row: try checked(table, $0)) }
    }

    /// In a write transaction that stamps rows, `SELECT *` with the rowid in front (see `checked`).
    func withRowid(_ sql: String) -> String {
        guard (self as? StoreWriter)?.changes != nil, sql.hasPrefix("SELECT * FROM") else { return sql }
        return "SELECT rowid AS \(RowIntegrity.rowidColumn), *" + sql.dropFirst("SELECT *".count)
    }

    /// A row named by its primary key, for messages: `kid=…`, `user_id=… server_name=…`.
    func rowName(_ table: String, _ columns: [String], _ values: [RowValue]) throws -> String {
        let key = (try? db.primaryKey(table).columns) ?? []
        let named = key.isEmpty ? [columns.first ?? "rowid"] : key
        return named.map { column in
            "\(column)=" + (columns.firstIndex(of: column).map { values[$0].display } ?? "?")
        }.joined(separator: " ")
    }

    /// Whether the store's rows carry MACs yet, and under which schema.
    package func rowStampState() throws -> RowStampState {
        guard let text = try String.fetchOne(db, sql: "SELECT row_sets FROM device WHERE id = 1") else { return .unstamped }
        var utf8 = Array(text.utf8)[...]
        // Unreadable: the device row's MAC reports it when the row is read.
        guard let schema = RowSets.schema(of: &utf8) else { return .current }
        return schema < EmbeddedMigration.latestVersion ? .olderSchema : .current
    }

    /// The schema version the store's rows were last stamped under (from the committed row sets); nil when never.
    package func stampedSchemaVersion() throws -> Int? { try committedRowSets()?.schema }

    /// Whether some row other than the device row holds under `keys`: proof that a master key is this store's when
    /// the device row (whose check value would say so) was edited.
    package func someRowHolds(keys: RowIntegrityKeys) throws -> Bool {
        for table in try coveredTables().keys.sorted() where table != RowIntegrity.rootTable {
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM \(table.quotedDatabaseIdentifier) LIMIT 1") else { continue }
            let (columns, values) = RowIntegrity.columnsAndValues(of: row)
            if try RowIntegrity.holds(table: table, columns: columns, values: values, keys: keys) { return true }
        }
        return false
    }

    /// The tables whose rows carry a MAC, with their columns in table order, as the live schema has them.
    func coveredTables() throws -> [String: [String]] {
        var tables: [String: [String]] = [:]
        for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") {
            let columns = try columnNames(table)
            if columns.contains(RowIntegrity.macColumn) { tables[table] = columns }
        }
        return tables
    }

    func columnNames(_ table: String) throws -> [String] {
        try db.cachedStatement(sql: "SELECT * FROM \(table.quotedDatabaseIdentifier)").columnNames
    }

    /// The committed row sets, from the device row (whose MAC the caller checked).
    func committedRowSets() throws -> RowSets? {
        try String.fetchOne(db, sql: "SELECT row_sets FROM device WHERE id = 1").flatMap(RowSets.init)
    }

    /// Checks every row of every covered table, and each table's set of rows against what the device row commits:
    /// what `keymgr audit verify` reports. Rows are encoded over the columns they were stamped with (the committed
    /// ones), so a store a later migration extended is checked as it was stamped.
    package func verifyAllRows(keys: RowIntegrityKeys) throws -> (checked: Int, problems: [RowProblem]) {
        var problems: [RowProblem] = []
        var checked = 0
        let covered = try coveredTables()
        guard let device = try Row.fetchOne(db, sql: "SELECT * FROM device WHERE id = 1") else {
            return (0, [RowProblem(table: RowIntegrity.rootTable, row: nil, reason: "the device row is missing")])
        }
        // Values a later migration dropped, put back where they were while the rows are stamped under an older schema.
        let dropped = (try committedRowSets()?.schema ?? EmbeddedMigration.latestVersion) < EmbeddedMigration.latestVersion
            ? try droppedValues() : [:]
        let (deviceColumns, deviceValues) = DroppedValue.restoring(dropped[RowIntegrity.rootTable]?[1] ?? [],
                                                                   into: RowIntegrity.columnsAndValues(of: device))
        checked += 1
        guard try RowIntegrity.holds(table: RowIntegrity.rootTable, columns: deviceColumns, values: deviceValues, keys: keys) else {
            // The row sets are under the device MAC: without it nothing else can be judged.
            return (checked, [RowProblem(table: RowIntegrity.rootTable, row: "id=1",
                                         reason: "its MAC does not hold: the device settings or the committed row sets were changed")])
        }
        guard let sets = try committedRowSets() else {
            return (checked, [RowProblem(table: RowIntegrity.rootTable, row: "id=1", reason: "it commits no row sets")])
        }
        for table in Set(covered.keys).union(sets.tables).sorted() where table != RowIntegrity.rootTable {
            guard let committed = sets[table] else {
                // A table a later migration added is stamped with the other rows once the old ones hold.
                if sets.schema < EmbeddedMigration.latestVersion { continue }
                problems.append(RowProblem(table: table, row: nil, reason: "the table is not among the committed row sets"))
                continue
            }
            guard covered[table] != nil else {
                problems.append(RowProblem(table: table, row: nil, reason: "the table or its row_mac column was removed"))
                continue
            }
            var digest = [UInt8](repeating: 0, count: 32)
            var count = 0
            let rows = try Row.fetchCursor(db, sql: "SELECT rowid AS \(RowIntegrity.rowidColumn), * FROM \(table.quotedDatabaseIdentifier)")
            while let row = try rows.next() {
                checked += 1
                count += 1
                let (columns, values) = RowIntegrity.columnsAndValues(of: row)
                let gone = dropped[table]?[row[RowIntegrity.rowidColumn]] ?? []
                let picked = committed.columns.map { column in
                    columns.firstIndex(of: column).map { values[$0] } ?? gone.first { $0.column == column }?.value
                }
                guard picked.allSatisfy({ $0 != nil }),
                      try RowIntegrity.holds(table: table, columns: committed.columns, values: picked.compactMap { $0 }, keys: keys),
                      let index = columns.firstIndex(of: RowIntegrity.macColumn), case .blob(let mac) = values[index] else {
                    problems.append(RowProblem(table: table, row: try rowName(table, columns, values),
                                               reason: "its MAC does not hold: a column was changed, or the row was moved or forged"))
                    continue
                }
                let tag = try keys.tag(mac)
                for position in digest.indices { digest[position] ^= tag[position] }
            }
            if count != committed.count {
                let difference = committed.count - count
                problems.append(RowProblem(table: table, row: nil, reason: difference > 0
                    ? "\(difference) row(s) deleted: the store committed \(committed.count), it holds \(count)"
                    : "\(-difference) row(s) added: the store committed \(committed.count), it holds \(count)"))
            } else if !constantTimeEqual(digest, committed.digest), !problems.contains(where: { $0.table == table }) {
                problems.append(RowProblem(table: table, row: nil, reason: "the set of rows is not the one the store committed: "
                    + "a row was deleted and another put in its place, or an older copy of a row was put back"))
            }
        }
        return (checked, problems)
    }
}

extension StoreWriter {
    /// Throws `.tampered` naming the first row or table that `verifyAllRows` finds wrong: before `master rotate` or a
    /// re-stamp after a migration blesses the rows under new MACs.
    package func verifyRowsOrThrow(keys: RowIntegrityKeys) throws {
        let (_, problems) = try verifyAllRows(keys: keys)
        if let first = problems.first {
            throw StorageError(.tampered, "the \(first.table) " + (first.row.map { "row \($0)" } ?? "table")
                + " does not hold (\(first.reason)): nothing was changed; run `keymgr audit verify` and restore the "
                + "store from a backup")
        }
    }

    /// Stamps every row of every covered table and the device row under `keys`, and commits each table's set, as of
    /// now: for a store made before row MACs (trusted as it is, once), after a migration and for `master rotate`
    /// (the last two once `verifyRowsOrThrow` passed, before the transaction changed anything).
    package func stampAllRows(keys: RowIntegrityKeys) throws {
        var sets = RowSets(schema: EmbeddedMigration.latestVersion)
        for (table, columns) in try coveredTables() where table != RowIntegrity.rootTable {
            var set = RowSets.TableSet(count: 0, digest: [UInt8](repeating: 0, count: 32), columns: columns)
            let rows = try Row.fetchAll(db, sql: "SELECT rowid AS keymgr_rowid, * FROM \(table.quotedDatabaseIdentifier)")
            for row in rows {
                let rowid: Int64 = row[0]
                set.toggle(try stampRow(table, rowid: rowid, keys: keys) ?? [], adding: true)
            }
            sets[table] = set
        }
        try db.execute(sql: "UPDATE device SET row_sets = ? WHERE id = 1", arguments: [sets.text])
        _ = try stampRow(RowIntegrity.rootTable, rowid: 1, keys: keys)
        // Every row holds under the latest schema now: the values dropped columns held are checked and not needed.
        if try hasDroppedValues() { try db.execute(sql: "DELETE FROM \(DroppedValue.table)") }
    }

    /// Computes and stores the MAC of the row at `rowid` as it is now; returns its tag, or nil when there is no row.
    ///
    /// - Throws: `.tampered` when the row's columns are not `expecting`, the ones the store committed (a column was
    ///   added or removed outside keymgr).
    private func stampRow(_ table: String, rowid: Int64, keys: RowIntegrityKeys, expecting: [String]? = nil) throws -> [UInt8]? {
        let name = table.quotedDatabaseIdentifier
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM \(name) WHERE rowid = ?", arguments: [rowid]) else { return nil }
        let (columns, values) = RowIntegrity.columnsAndValues(of: row)
        if let expecting, columns != expecting {
            throw StorageError(.tampered, "the table \(table) does not have the columns the store committed (a column was "
                + "added or removed outside keymgr): run `keymgr audit verify` and restore the store from a backup")
        }
        let mac = try keys.mac(RowIntegrity.encoding(table: table, columns: columns, values: values))
        try db.execute(sql: "UPDATE \(name) SET \(RowIntegrity.macColumn) = ? WHERE rowid = ?", arguments: [Data(mac), rowid])
        return try keys.tag(mac)
    }

    /// At the end of a write transaction: checks the old values of every row it changed or deleted against their MAC
    /// (so keymgr never builds on, or blesses, a row someone edited), stamps every row it changed or inserted, and
    /// updates each touched table's committed set and the device row. Costs only the rows the transaction touched.
    func sealChanges(_ log: RowChangeLog, keys: RowIntegrityKeys) throws {
        log.pause()
        let events = try log.events()
        guard !events.isEmpty else { return }
        struct Ref: Hashable, Comparable {
            let table: String
            let rowid: Int64
            static func < (a: Ref, b: Ref) -> Bool { (a.table, a.rowid) < (b.table, b.rowid) }
        }
        // Each touched row's values before the transaction: nil when it did not exist.
        var before: [Ref: [RowValue]?] = [:]
        for event in events {
            switch event.op {
            case UInt8(ascii: "I"):
                let ref = Ref(table: event.table, rowid: event.newRowid)
                if before.index(forKey: ref) == nil { before[ref] = .some(nil) }
            default:
                let ref = Ref(table: event.table, rowid: event.oldRowid)
                if before.index(forKey: ref) == nil { before[ref] = .some(event.old) }
                if event.op == UInt8(ascii: "U"), event.newRowid != event.oldRowid {
                    let moved = Ref(table: event.table, rowid: event.newRowid)
                    if before.index(forKey: moved) == nil { before[moved] = .some(nil) }
                }
            }
        }
        let rootRef = Ref(table: RowIntegrity.rootTable, rowid: 1)
        let deviceCreated = before[rootRef].map { $0 == nil } ?? false
        // The device row as it is now, read once: its columns, and the committed sets with the covered tables and
        // their columns (no schema look-up for the tables a write touches that keymgr does not cover, the audit log).
        guard let deviceRow = try Row.fetchOne(db, sql: "SELECT * FROM device WHERE id = 1") else {
            throw RowIntegrity.tamperedError(table: RowIntegrity.rootTable, row: "id=1")
        }
        let (rootColumns, rootValues) = RowIntegrity.columnsAndValues(of: deviceRow)
        guard let setsIndex = rootColumns.firstIndex(of: RowIntegrity.setsColumn) else {
            throw RowIntegrity.tamperedError(table: RowIntegrity.rootTable, row: "id=1")
        }
        var sets: RowSets
        if case .text(let text) = rootValues[setsIndex], let committed = RowSets(String(decoding: text, as: UTF8.self)) {
            sets = committed
        } else if deviceCreated {
            sets = RowSets(schema: EmbeddedMigration.latestVersion)
            for (table, names) in try coveredTables() where table != RowIntegrity.rootTable {
                sets[table] = RowSets.TableSet(count: 0, digest: [UInt8](repeating: 0, count: 32), columns: names)
            }
        } else {
            throw RowIntegrity.tamperedError(table: RowIntegrity.rootTable, row: "id=1")
        }
        // Decoded once, and only for the tables this transaction touched.
        for table in Set(before.keys.map(\.table)) where table != RowIntegrity.rootTable {
            if let set = sets[table] { sets[table] = set }
        }
        func columns(_ table: String) -> [String]? {
            table == RowIntegrity.rootTable ? rootColumns : sets[table]?.columns
        }
        let touched = before.keys.filter { columns($0.table) != nil }.sorted()
        guard !touched.isEmpty else { return }

        // 1. Every old row keymgr changes or deletes must hold, the device row (and its row sets) included.
        var oldMacs: [Ref: [UInt8]] = [:]
        for ref in touched {
            guard case .some(.some(let old)) = before[ref], let names = columns(ref.table) else { continue }
            guard old.count == names.count, try RowIntegrity.holds(table: ref.table, columns: names, values: old, keys: keys),
                  let index = names.firstIndex(of: RowIntegrity.macColumn), case .blob(let mac) = old[index] else {
                throw RowIntegrity.tamperedError(table: ref.table, row: try rowName(ref.table, names, old))
            }
            oldMacs[ref] = mac
        }
        // The row sets come from the device row: checked now when this transaction did not change it (else above).
        if before[rootRef] == nil { _ = try checked(RowIntegrity.rootTable, deviceRow, rowid: 1) }

        // 2. The touched rows leave their table's set as they were, and enter it as they are now, stamped.
        for ref in touched where ref.table != RowIntegrity.rootTable {
            guard var set = sets[ref.table] else { continue }
            if let mac = oldMacs[ref] { set.toggle(try keys.tag(mac), adding: false) }
            if let tag = try stampRow(ref.table, rowid: ref.rowid, keys: keys, expecting: set.columns) {
                set.toggle(tag, adding: true)
            }
            sets[ref.table] = set
        }
        // 3. The device row commits the sets, and is stamped with them, in one statement.
        var values = rootValues
        let text = sets.text
        values[setsIndex] = .text(Array(text.utf8))
        let mac = try keys.mac(RowIntegrity.encoding(table: RowIntegrity.rootTable, columns: rootColumns, values: values))
        try db.execute(sql: "UPDATE device SET \(RowIntegrity.setsColumn) = ?, \(RowIntegrity.macColumn) = ? WHERE id = 1",
                       arguments: [text, Data(mac)])
    }
}

extension StoreReader {
    /// Rows the audit log says should be there and are not: keys bound, PIN records of usable PIN keys,
    /// registrations and token sets last created and never removed since. How `keymgr audit verify` names a
    /// deletion its row-set check found.
    package func missingRows() throws -> [RowProblem] {
        var missing: [RowProblem] = []
        for kid in try String.fetchAll(db, sql: """
            SELECT DISTINCT kid FROM audit_events WHERE event IN ('key.bound', 'key.rebound') AND kid IS NOT NULL
              AND kid NOT IN (SELECT kid FROM user_keys) ORDER BY kid
            """) {
            missing.append(RowProblem(table: "user_keys", row: "kid=\(RowValue.text(Array(kid.utf8)).display)",
                                      reason: "deleted: the audit log records its binding"))
        }
        // A usable PIN key without its record, or a PIN key deleted with its record.
        for kid in try String.fetchAll(db, sql: """
            SELECT kid FROM user_keys WHERE auth_type = 'APPLICATION_PIN' AND status IN ('active', 'locked')
              AND kid NOT IN (SELECT kid FROM app_pins)
            UNION
            SELECT kid FROM audit_events WHERE event IN ('key.bound', 'key.rebound') AND kid IS NOT NULL
              AND json_extract(details, '$.authType') = 'APPLICATION_PIN'
              AND kid NOT IN (SELECT kid FROM user_keys) AND kid NOT IN (SELECT kid FROM app_pins)
            ORDER BY kid
            """) {
            missing.append(RowProblem(table: "app_pins", row: "kid=\(RowValue.text(Array(kid.utf8)).display)",
                                      reason: "deleted: the PIN record of an APPLICATION_PIN key"))
        }
        let perServer: [(table: String, created: String, removed: String)] = [
            ("registrations", "'dcr.registered'", "'dcr.deleted', 'dcr.revokedByServer'"),
            ("tokens", "'tokens.login', 'tokens.imported', 'tokens.refreshed'", "'tokens.discarded'"),
        ]
        for (table, created, removed) in perServer {
            let rows = try Row.fetchAll(db, sql: """
                SELECT DISTINCT a.user_id, json_extract(a.details, '$.server') AS server FROM audit_events a
                WHERE a.event IN (\(created)) AND a.user_id IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM audit_events b WHERE b.seq > a.seq AND b.user_id = a.user_id
                      AND (b.event = 'credentials.wiped'
                           OR (b.event IN (\(removed)) AND json_extract(b.details, '$.server') = json_extract(a.details, '$.server'))))
                  AND NOT EXISTS (SELECT 1 FROM \(table) t WHERE t.user_id = a.user_id
                      AND t.server_name = json_extract(a.details, '$.server'))
                ORDER BY 1, 2
                """)
            for row in rows {
                let user = RowValue(row["user_id"] as DatabaseValue).display
                let server = RowValue(row["server"] as DatabaseValue).display
                missing.append(RowProblem(table: table, row: "user_id=\(user) server_name=\(server)",
                                          reason: "deleted: the audit log records it and no removal since"))
            }
        }
        return missing
    }
}

/// A value of a column a migration dropped (migration 0012's `dropped_columns`), kept until the first open with the
/// master key has checked the rows stamped while the column was there.
struct DroppedValue {
    static let table = "dropped_columns"
    let column: String
    /// The column's position in its table before it was dropped.
    let position: Int
    let value: RowValue

    /// `row` (columns and values as read now) with `dropped` put back at their old positions, in order.
    static func restoring(_ dropped: [DroppedValue], into row: ([String], [RowValue])) -> ([String], [RowValue]) {
        var (columns, values) = row
        for value in dropped.sorted(by: { $0.position < $1.position }) {
            let at = min(max(value.position, 0), columns.count)
            columns.insert(value.column, at: at)
            values.insert(value.value, at: at)
        }
        return (columns, values)
    }
}

extension StoreReader {
    /// Whether the store has the table of dropped values (asked of the schema itself, not of a cache another
    /// process's migration may have outdated).
    func hasDroppedValues() throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                          arguments: [DroppedValue.table]) ?? false
    }

    /// The values of dropped columns still kept, by table and rowid.
    func droppedValues() throws -> [String: [Int64: [DroppedValue]]] {
        guard try hasDroppedValues() else { return [:] }
        var found: [String: [Int64: [DroppedValue]]] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT table_name, column_name, position, row_id, value FROM \(DroppedValue.table)") {
            let value = DroppedValue(column: row[1], position: row[2], value: RowValue(row[4] as DatabaseValue))
            found[row[0], default: [:]][row[3], default: []].append(value)
        }
        return found
    }

    /// The field MACs of migration 0002 that migration 0012 kept, by table and the row's key (`device`: "1";
    /// `user_keys`, `app_pins`: the kid; `servers`: the name): what the first open of a store made before row MACs
    /// checks before it stamps them. Empty once the rows are stamped under the latest schema.
    package func droppedFieldMACs() throws -> [String: [String: Data]] {
        guard try hasDroppedValues() else { return [:] }
        var found: [String: [String: Data]] = [:]
        for (table, key) in [("device", "id"), ("user_keys", "kid"), ("app_pins", "kid"), ("servers", "name")] {
            let rows = try Row.fetchAll(db, sql: """
                SELECT CAST(t.\(key) AS TEXT), d.value FROM \(DroppedValue.table) d JOIN \(table) t ON t.rowid = d.row_id
                WHERE d.table_name = ? AND d.column_name = 'integrity_mac' AND typeof(d.value) = 'blob'
                """, arguments: [table])
            for row in rows { found[table, default: [:]][row[0]] = row[1] }
        }
        return found
    }
}
