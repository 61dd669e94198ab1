import Foundation
import XCTest

/// Every audit entry also goes to the journal through its native protocol; here to a datagram socket the test
/// listens on (KEYMGR_JOURNAL_SOCKET, for tests only). The journal copy is then checked offline with
/// `keymgr audit verify --journal`, as a central log server would, from an export in `journalctl -o json`'s form.
final class AuditJournalTests: XCTestCase {
    /// A bound Unix datagram socket standing in for journald's.
    final class JournalListener {
        let path: String
        private let descriptor: Int32

        init(in directory: URL) throws {
            path = directory.appendingPathComponent("journal.sock").path
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            XCTAssertEqual(bound, 0, String(cString: strerror(errno)))
            chmod(path, 0o666)
            var size: Int32 = 4 << 20
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }

        deinit { close(descriptor) }

        /// Every datagram received so far, each as its fields (the native protocol's two forms).
        func received() -> [[String: String]] {
            var messages: [[String: String]] = []
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let got = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                guard got > 0 else { return messages }
                messages.append(Self.fields(Array(buffer.prefix(got))))
            }
        }

        static func fields(_ bytes: [UInt8]) -> [String: String] {
            var fields: [String: String] = [:]
            var index = 0
            while index < bytes.count {
                guard let end = bytes[index...].firstIndex(of: 0x0A) else { break }
                let line = bytes[index..<end]
                if let equals = line.firstIndex(of: UInt8(ascii: "=")) {
                    fields[String(decoding: line[..<equals], as: UTF8.self)] = String(decoding: line[(equals + 1)...], as: UTF8.self)
                    index = end + 1
                } else {
                    let name = String(decoding: line, as: UTF8.self)
                    var length: UInt64 = 0
                    for (shift, byte) in bytes[(end + 1)..<(end + 9)].enumerated() { length |= UInt64(byte) << (8 * UInt64(shift)) }
                    let start = end + 9
                    fields[name] = String(decoding: bytes[start..<(start + Int(length))], as: UTF8.self)
                    index = start + Int(length) + 1
                }
            }
            return fields
        }
    }

    /// The messages as `journalctl -o json` prints them: one object a line, with journald's own fields beside.
    static func export(_ messages: [[String: String]]) throws -> String {
        try messages.enumerated().map { index, fields in
            var object: [String: Any] = fields
            object["__CURSOR"] = "s=0;i=\(index)"
            object["_PID"] = "1234"
            object["_TRANSPORT"] = "journal"
            return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        }.joined(separator: "\n") + "\n"
    }

    func testEveryEntryGoesToTheJournalAndTheExportVerifiesNamingARemovedAndAnEditedEntry() throws {
        let sandbox = try Sandbox()
        let listener = try JournalListener(in: sandbox.root)
        let journal = ["KEYMGR_JOURNAL_SOCKET": listener.path]
        func run(_ arguments: [String], stdin: String = "") throws {
            let outcome = try sandbox.keymgr(arguments, stdin: stdin, extraEnvironment: journal)
            XCTAssertEqual(outcome.status, 0, outcome.summary)
        }
        try run(["init", "--device-name", "journal kiosk"] + Sandbox.fastInit)
        try run(["bind", "--user", "alice"])
        try run(["bind", "--user", "bob", "--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try run(["sign", "--user", "alice", "--challenge", "c1"])
        try run(["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n")
        try run(["revoke", "--user", "alice", "--yes"])

        let messages = listener.received().filter { $0["KEYMGR_SEQ"] != nil }
        let store = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertEqual(messages.map { $0["KEYMGR_SEQ"] }, store.map { ($0["seq"] as? Int).map(String.init) },
                       "every entry, once, in order")
        for (message, entry) in zip(messages, store) {
            for field in ["MESSAGE", "MESSAGE_ID", "KEYMGR_SEQ", "KEYMGR_EVENT", "KEYMGR_ACTOR", "KEYMGR_ACTOR_UID",
                          "KEYMGR_HASH", "KEYMGR_PREV_HASH"] {
                XCTAssertNotNil(message[field], "\(field) in \(message)")
            }
            XCTAssertEqual(message["KEYMGR_EVENT"], entry["event"] as? String)
            XCTAssertEqual(message["KEYMGR_HASH"], entry["hash"] as? String)
            XCTAssertEqual(message["KEYMGR_PREV_HASH"], entry["prevHash"] as? String)
            XCTAssertEqual(message["KEYMGR_USER"], entry["userId"] as? String)
            XCTAssertEqual(message["KEYMGR_KID"], entry["kid"] as? String)
            XCTAssertEqual(message["KEYMGR_ACTOR_UID"], String(getuid()))
            XCTAssertEqual(message["MESSAGE_ID"]?.count, 32)
            XCTAssertTrue(message["MESSAGE"]?.contains(entry["event"] as? String ?? "?") ?? false)
        }
        // One MESSAGE_ID per event type.
        var ids: [String: Set<String>] = [:]
        for message in messages { ids[message["KEYMGR_EVENT"] ?? "", default: []].insert(message["MESSAGE_ID"] ?? "") }
        XCTAssertTrue(ids.values.allSatisfy { $0.count == 1 }, "\(ids)")
        XCTAssertEqual(Set(ids.values.compactMap(\.first)).count, ids.count, "distinct events, distinct ids")
        // Never a secret: not the master key, not the PIN.
        let masterKey = try Data(contentsOf: sandbox.home.appendingPathComponent("master.key"))
        let everything = messages.flatMap { $0.values }.joined(separator: "\n")
        XCTAssertFalse(everything.contains("482916"))
        for encoding in [masterKey.base64EncodedString(), masterKey.map { String(format: "%02x", $0) }.joined()] {
            XCTAssertFalse(everything.contains(encoding))
        }

        let directory = sandbox.root
        func verify(_ export: String, _ name: String) throws -> Outcome {
            let file = directory.appendingPathComponent(name)
            try export.write(to: file, atomically: true, encoding: .utf8)
            return try sandbox.keymgr(["audit", "verify", "--journal", file.path])
        }
        let whole = try Self.export(messages)
        let intact = try verify(whole, "whole.json")
        XCTAssertEqual(intact.status, 0, intact.summary)
        XCTAssertTrue(intact.stdout.contains("\(messages.count) entries") && intact.stdout.contains("intact"), intact.summary)

        // An entry removed from the journal: named.
        var removed = messages
        let gone = removed.remove(at: 3)
        let cut = try verify(try Self.export(removed), "removed.json")
        XCTAssertEqual(cut.status, 1, cut.summary)
        XCTAssertTrue(cut.stderr.contains("entry \(gone["KEYMGR_SEQ"] ?? "?") is missing"), cut.summary)

        // An entry edited in the journal (the actor changed): named as altered.
        var edited = messages
        edited[2]["KEYMGR_ACTOR"] = "someone-else"
        let altered = try verify(try Self.export(edited), "edited.json")
        XCTAssertEqual(altered.status, 1, altered.summary)
        XCTAssertTrue(altered.stderr.contains("entry \(edited[2]["KEYMGR_SEQ"] ?? "?") (") && altered.stderr.contains("was altered"),
                      altered.summary)
        let report = try sandbox.keymgr(["audit", "verify", "--journal", directory.appendingPathComponent("removed.json").path, "--json"])
        let chains = try XCTUnwrap(try report.object()["chains"] as? [[String: Any]])
        XCTAssertEqual(chains.count, 1)
        XCTAssertEqual((chains.first?["problems"] as? [[String: Any]])?.first?["seq"] as? Int, Int(gone["KEYMGR_SEQ"] ?? ""))
    }
}
