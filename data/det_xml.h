/* det_xml.h — a small strict XML reader for annotation files (internal to data/).
 *
 * Reads the subset of XML 1.0 that annotation tools write: an optional BOM, <?...?>
 * declarations, comments, one root element, attributes (skipped), self-closing tags, CDATA,
 * the five predefined entities and character references. It reports element starts and ends
 * through a callback; an element's end carries its decoded text (the character data directly
 * inside it when it has no child elements, else ""). Anything else — a DOCTYPE (no entity
 * expansion), an unknown entity, a mismatched or unclosed tag, a NUL byte, nesting deeper
 * than MPX_XML_MAX_DEPTH, text over MPX_XML_MAX_TEXT bytes, a file cut short — is
 * MPX_ERR_INPUT naming the file and the line. Input is never assumed NUL-terminated.
 */
#ifndef MPX_DATA_DET_XML_H
#define MPX_DATA_DET_XML_H

#include <stddef.h>

#include "mpx/error.h"

enum { MPX_XML_MAX_DEPTH = 32, MPX_XML_MAX_NAME = 255, MPX_XML_MAX_TEXT = 4095 };

/* depth: 1 for the root element. text is NULL for a start, the decoded text for an end. */
typedef mpx_status (*mpx_xml_handler)(void *user, int depth, const char *name, const char *text,
                                      int line);

mpx_status mpx_xml_parse(const char *buf, size_t n, const char *path, mpx_xml_handler handler,
                         void *user);

#endif
