// Validates an OpenAPI document (a file path) with two independent validators:
// - @seriousme/openapi-schema-validator: the document against the official OpenAPI 3.1
//   JSON Schema (strict: unknown keywords fail);
// - @readme/openapi-parser: the spec's own rules that no JSON Schema can express
//   (every $ref resolves, path parameters are declared, operationIds are unique).
// Prints every problem found and exits 1 when there is any.
import { readFile } from 'node:fs/promises';
import { Validator } from '@seriousme/openapi-schema-validator';
import { validate } from '@readme/openapi-parser';

const file = process.argv[2];
if (!file) {
  console.error('usage: node validate.mjs openapi.json');
  process.exit(2);
}
const document = JSON.parse(await readFile(file, 'utf8'));
let failed = false;

const schemaValidator = new Validator();
const schemaResult = await schemaValidator.validate(structuredClone(document));
if (schemaResult.valid) {
  console.log(`openapi-schema-validator: valid OpenAPI ${schemaValidator.version}`);
} else {
  failed = true;
  console.log('openapi-schema-validator: INVALID');
  console.log(JSON.stringify(schemaResult.errors, null, 2));
}

const parserResult = await validate(structuredClone(document));
if (parserResult.valid) {
  console.log('openapi-parser: valid' + (parserResult.warnings?.length ? ` (${parserResult.warnings.length} warnings)` : ''));
  for (const warning of parserResult.warnings ?? []) console.log('  warning:', warning.message ?? JSON.stringify(warning));
} else {
  failed = true;
  console.log('openapi-parser: INVALID');
  for (const error of parserResult.errors) console.log('  ', error.message ?? JSON.stringify(error));
}
process.exit(failed ? 1 : 0);
