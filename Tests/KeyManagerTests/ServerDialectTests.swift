import Foundation
import KeyManager
import XCTest

/// Every dialect keymgr knows answers for itself: its name, the names `--dialect` takes, its spelling in the store,
/// and its capabilities. Code asks these, never a dialect's name, so a new dialect is one file plus its case here.
final class ServerDialectTests: XCTestCase {
    func testEachDialectIsChosenByItsOwnNameAndStoredSpelling() {
        var stored = Set<String>()
        var names = Set<String>()
        for name in DialectName.allCases {
            let dialect = name.dialect
            XCTAssertEqual(dialect.name, name, "the factory maps \(name) to its own dialect")
            XCTAssertEqual(DialectName(name: name.rawValue.uppercased()), name)
            XCTAssertEqual(DialectName(stored: dialect.storedName), name)
            XCTAssertTrue(stored.insert(dialect.storedName).inserted, "two dialects store \(dialect.storedName)")
            for alias in [name.rawValue] + dialect.aliases {
                XCTAssertTrue(names.insert(alias).inserted, "two dialects answer to \(alias)")
                XCTAssertEqual(DialectName(name: alias), name)
            }
            XCTAssertFalse(dialect.missingBaseURL.isEmpty)
        }
        XCTAssertNil(DialectName(name: "future"))
        XCTAssertNil(DialectName(stored: "oauth"), "the OAuth dialect is stored as curity, its first name")
    }

    func testCapabilities() {
        XCTAssertEqual(DialectName.pingam.dialect.deviceRegistry, .pingAMDeviceREST)
        XCTAssertEqual(DialectName.pingam.dialect.journeys, .pingAMAuthenticate)
        XCTAssertFalse(DialectName.pingam.dialect.issuerStandsForBaseURL)
        XCTAssertNil(DialectName.oauth.dialect.deviceRegistry)
        XCTAssertNil(DialectName.oauth.dialect.journeys)
        XCTAssertTrue(DialectName.oauth.dialect.issuerStandsForBaseURL)
        for name in DialectName.allCases { XCTAssertEqual(name.dialect.registrations, .rfc7591) }
        XCTAssertEqual(DialectName.accepted, "pingam or oauth (or curity, another name for oauth)")
    }

    func testTheBaseURLRuleAsksTheDialect() throws {
        let issuer = try XCTUnwrap(URL(string: "https://as.example.com/"))
        XCTAssertEqual(try ServerSettings.baseURL(given: nil, dialect: .oauth, issuer: issuer).absoluteString, "https://as.example.com")
        XCTAssertThrowsError(try ServerSettings.baseURL(given: nil, dialect: .pingam, issuer: issuer)) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .usage)
            XCTAssertEqual((error as? KeyManagerError)?.message, DialectName.pingam.dialect.missingBaseURL)
        }
    }
}
