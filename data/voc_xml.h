/* voc_xml.h — the annotation files' XML, read with expat (internal to data/).
 *
 * Element starts and ends reach a callback; an element's end carries its text (the character
 * data directly inside it when it has no child elements, else ""). Refused, as MPX_ERR_INPUT
 * naming the file and the line in words a user can act on: anything expat finds malformed, a
 * DOCTYPE (so no entity declarations are ever expanded), nesting deeper than
 * MPX_XML_MAX_DEPTH, names over MPX_XML_MAX_NAME and text over MPX_XML_MAX_TEXT bytes, a NUL
 * byte, a file cut short. Input is never assumed NUL-terminated.
 */
#ifndef MPX_DATA_VOC_XML_H
#define MPX_DATA_VOC_XML_H

#include <stddef.h>

#include "mpx/error.h"

enum { MPX_XML_MAX_DEPTH = 32, MPX_XML_MAX_NAME = 255, MPX_XML_MAX_TEXT = 4095 };

/* depth: 1 for the root element. text is NULL for a start, the decoded text for an end. */
typedef mpx_status (*mpx_xml_handler)(void *user, int depth, const char *name, const char *text,
                                      int line);

mpx_status mpx_xml_parse(const char *buf, size_t n, const char *path, mpx_xml_handler handler,
                         void *user);

#endif
