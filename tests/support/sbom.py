"""The real SBOM validators the tests run a document through: cyclonedx-python-lib's strict
JSON validation (CycloneDX 1.6) and spdx-tools' parser and full validation, both offline, less
the one spdx-tools message that misreads a BLAKE3 value's length."""

from __future__ import annotations

from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.json.json_parser import parse_from_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
from spdx_tools.spdx.validation.validation_message import ValidationMessage

from fetchproxy.provenance.sbom import render


def cyclonedx_errors(document: dict[str, object]) -> object:
    return JsonStrictValidator(SchemaVersion.V1_6).validate_str(render(document))


def spdx_messages(document: dict[str, object], tmp_path: Path) -> list[ValidationMessage]:
    path = tmp_path / "sbom.spdx.json"
    path.write_text(render(document))
    messages = validate_full_spdx_document(parse_from_file(str(path)))
    return [m for m in messages if not _is_spdx_tools_blake3_length_bug(m)]


def _is_spdx_tools_blake3_length_bug(message: ValidationMessage) -> bool:
    """spdx-tools (0.8.x) wants BLAKE3 values of "at least 256" hex digits: it means 256
    bits. SPDX 2.3 (7.10) names BLAKE3 with no length; b3sum's 64 hex digits are BLAKE3's
    standard output. Only that message is set aside, for a 64-digit value."""
    text = message.validation_message
    return text.startswith(
        "value of ChecksumAlgorithm.BLAKE3 must consist of at least 256 lowercase hexadecimal"
    ) and text.endswith("(length: 64 digits)")
