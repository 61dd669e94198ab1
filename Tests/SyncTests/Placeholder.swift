import XCTest

final class PlaceholderSyncTests: XCTestCase {}
